#include "node/host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace ps {

namespace {

// The longest host name DNS allows.
constexpr size_t kMaxHostBytes = 253;

// The address part of an IPv6 literal with a zone ("fe80::1%eth0").
std::string WithoutZone(const std::string& host) {
  return host.substr(0, host.find('%'));
}

std::string Numeric(const struct sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr,
              buf, sizeof(buf));
  } else if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr,
              buf, sizeof(buf));
  }
  return buf;
}

bool IsLinkLocal(const struct sockaddr* addr) {
  if (addr->sa_family != AF_INET6) return false;
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
  return IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr);
}

// Owns the list getifaddrs returns.
class InterfaceList {
 public:
  InterfaceList() {
    if (getifaddrs(&list_) != 0) {
      error_ = errno;
      list_ = nullptr;
    }
  }
  ~InterfaceList() {
    if (list_ != nullptr) freeifaddrs(list_);
  }
  InterfaceList(const InterfaceList&) = delete;
  InterfaceList& operator=(const InterfaceList&) = delete;

  const struct ifaddrs* first() const { return list_; }
  int error() const { return error_; }

 private:
  struct ifaddrs* list_ = nullptr;
  int error_ = 0;
};

}  // namespace

bool IsIPv6Address(const std::string& host) {
  if (host.find(':') == std::string::npos) return false;
  struct in6_addr addr;
  return inet_pton(AF_INET6, WithoutZone(host).c_str(), &addr) == 1;
}

bool IsNumericAddress(const std::string& host) {
  struct in_addr addr;
  return inet_pton(AF_INET, host.c_str(), &addr) == 1 || IsIPv6Address(host);
}

bool IsLoopbackAddress(const std::string& host) {
  struct in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  struct in6_addr v6;
  if (inet_pton(AF_INET6, WithoutZone(host).c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

StatusOr<std::string> NormalizeHost(const std::string& host,
                                    const std::string& variable) {
  std::string h = host;
  const bool bracketed = h.size() >= 2 && h.front() == '[' && h.back() == ']';
  if (bracketed) h = h.substr(1, h.size() - 2);
  const std::string quoted = variable + "='" + host + "'";
  if (h.empty()) return Status::InvalidArgument(variable + " is empty");
  if (h.size() > kMaxHostBytes) {
    return Status::InvalidArgument(quoted + " is longer than " +
                                   std::to_string(kMaxHostBytes) + " bytes");
  }
  if (h.find(':') != std::string::npos || bracketed) {
    if (!IsIPv6Address(h)) {
      return Status::InvalidArgument(
          quoted + " is not an IPv6 address (a host with ':' must be one)");
    }
    return h;
  }
  for (char c : h) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' &&
        c != '_') {
      return Status::InvalidArgument(
          quoted + " is not a host name or an IPv4 or IPv6 address");
    }
  }
  return h;
}

StatusOr<std::string> ResolveHost(const std::string& host,
                                  const std::string& variable) {
  if (IsNumericAddress(host)) return host;
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    return Status::InvalidArgument(variable + "='" + host +
                                   "' does not resolve: " + gai_strerror(rc));
  }
  std::string address;
  for (const struct addrinfo* a = result; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) {
      address = Numeric(a->ai_addr);
      break;
    }
  }
  freeaddrinfo(result);
  if (address.empty()) {
    return Status::InvalidArgument(variable + "='" + host +
                                   "' has no IPv4 or IPv6 address");
  }
  return address;
}

StatusOr<std::string> InterfaceAddress(const std::string& name,
                                       const std::string& variable) {
  InterfaceList interfaces;
  if (interfaces.error() != 0) {
    return Status::InvalidArgument(
        variable + "=" + name +
        ": getifaddrs failed: " + std::strerror(interfaces.error()));
  }
  bool exists = false;
  std::string v6;
  for (const struct ifaddrs* a = interfaces.first(); a != nullptr;
       a = a->ifa_next) {
    if (name != a->ifa_name) continue;
    exists = true;
    if (a->ifa_addr == nullptr) continue;
    if (a->ifa_addr->sa_family == AF_INET) return Numeric(a->ifa_addr);
    if (a->ifa_addr->sa_family == AF_INET6 && v6.empty() &&
        !IsLinkLocal(a->ifa_addr)) {
      v6 = Numeric(a->ifa_addr);
    }
  }
  if (!v6.empty()) return v6;
  return Status::InvalidArgument(
      variable + "=" + name +
      (exists ? ": the interface has no IPv4 address and no IPv6 address "
                "outside fe80::/10"
              : ": no such interface"));
}

StatusOr<std::string> FirstNonLoopbackAddress(int family) {
  InterfaceList interfaces;
  if (interfaces.error() != 0) {
    return Status::Unavailable(std::string("getifaddrs failed: ") +
                               std::strerror(interfaces.error()));
  }
  for (const struct ifaddrs* a = interfaces.first(); a != nullptr;
       a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != family) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    if (IsLinkLocal(a->ifa_addr)) continue;
    std::string address = Numeric(a->ifa_addr);
    if (!IsLoopbackAddress(address)) return address;
  }
  return Status::Unavailable(
      std::string("no interface that is up has a non-loopback ") +
      (family == AF_INET6 ? "IPv6" : "IPv4") + " address");
}

StatusOr<std::string> RouteAddress(const std::string& destination, int port,
                                   const std::string& variable) {
  struct sockaddr_storage to;
  std::memset(&to, 0, sizeof(to));
  socklen_t to_size = 0;
  const std::string where =
      variable + "=" + destination + " (port " + std::to_string(port) + ")";
  struct in_addr v4;
  if (inet_pton(AF_INET, destination.c_str(), &v4) == 1) {
    auto* in = reinterpret_cast<sockaddr_in*>(&to);
    in->sin_family = AF_INET;
    in->sin_addr = v4;
    in->sin_port = htons(static_cast<uint16_t>(port));
    to_size = sizeof(*in);
  } else {
    // getaddrinfo parses the zone of a link-local literal into its scope.
    struct addrinfo hints;
    std::memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET6;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICHOST;
    struct addrinfo* result = nullptr;
    if (getaddrinfo(destination.c_str(), nullptr, &hints, &result) != 0 ||
        result == nullptr) {
      return Status::InvalidArgument(where + " is not a numeric address");
    }
    std::memcpy(&to, result->ai_addr, result->ai_addrlen);
    to_size = result->ai_addrlen;
    freeaddrinfo(result);
    reinterpret_cast<sockaddr_in6*>(&to)->sin6_port =
        htons(static_cast<uint16_t>(port));
  }
  const int family = to.ss_family;
  const int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return Status::InvalidArgument(
        where + ": cannot open a UDP socket: " + std::strerror(errno));
  }
  // A UDP connect only picks the route; nothing is sent.
  if (connect(fd, reinterpret_cast<struct sockaddr*>(&to), to_size) != 0) {
    const int error = errno;
    close(fd);
    return Status::InvalidArgument(
        where + ": no route to the scheduler from this host (" +
        std::strerror(error) + "); set DMLC_NODE_HOST or DMLC_INTERFACE");
  }
  struct sockaddr_storage me;
  socklen_t me_size = sizeof(me);
  const int rc =
      getsockname(fd, reinterpret_cast<struct sockaddr*>(&me), &me_size);
  const int error = errno;
  close(fd);
  if (rc != 0) {
    return Status::InvalidArgument(
        where + ": getsockname failed: " + std::strerror(error));
  }
  std::string address = Numeric(reinterpret_cast<struct sockaddr*>(&me));
  if (IsLinkLocal(reinterpret_cast<struct sockaddr*>(&me))) {
    // Peers need the zone to reach it; ours is the scheduler's.
    const std::string::size_type zone = destination.find('%');
    if (zone != std::string::npos) address += destination.substr(zone);
  }
  if (IsLoopbackAddress(address) && !IsLoopbackAddress(destination)) {
    auto other = FirstNonLoopbackAddress(family);
    if (!other.ok()) {
      return Status::InvalidArgument(
          where + ": the route to the scheduler leaves through loopback and " +
          other.status().message() + "; set DMLC_NODE_HOST");
    }
    address = *other;
  }
  return address;
}

}  // namespace ps
