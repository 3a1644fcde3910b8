#include "node/host_address.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace ps {
namespace {

// True if this host can open an IPv6 socket on ::1.
bool HasIPv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_DGRAM, 0);
  if (fd < 0) return false;
  struct sockaddr_in6 addr = {};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  const bool ok =
      bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

void ExpectInvalidNaming(const Status& status, const std::string& variable) {
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(variable), std::string::npos) << status;
}

TEST(HostAddressTest, ClassifiesNumericAddresses) {
  EXPECT_TRUE(IsNumericAddress("10.0.0.1"));
  EXPECT_TRUE(IsNumericAddress("fd00::1"));
  EXPECT_TRUE(IsNumericAddress("fe80::1%eth0"));
  EXPECT_FALSE(IsNumericAddress("localhost"));
  EXPECT_FALSE(IsNumericAddress("[::1]"));
  EXPECT_TRUE(IsIPv6Address("::1"));
  EXPECT_FALSE(IsIPv6Address("127.0.0.1"));
  EXPECT_FALSE(IsIPv6Address("host:80"));
}

TEST(HostAddressTest, LoopbackIsAllOf127AndColonColonOne) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.2.1"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_TRUE(IsLoopbackAddress("::ffff:127.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("::"));
  EXPECT_FALSE(IsLoopbackAddress("localhost"));  // Names are not resolved.
}

TEST(HostAddressTest, NormalizeAcceptsNamesAndAddressesAndDropsBrackets) {
  EXPECT_EQ(*NormalizeHost("node-1.example_net", "V"), "node-1.example_net");
  EXPECT_EQ(*NormalizeHost("10.1.2.3", "V"), "10.1.2.3");
  EXPECT_EQ(*NormalizeHost("fd00::1", "V"), "fd00::1");
  EXPECT_EQ(*NormalizeHost("[fd00::1]", "V"), "fd00::1");
  EXPECT_EQ(*NormalizeHost("fe80::1%eth0", "V"), "fe80::1%eth0");
}

TEST(HostAddressTest, NormalizeRejectsWhatIsNeitherNameNorAddress) {
  for (const char* bad : {"", "[]", "a b", "10.0.0.1:80", "[10.0.0.1]",
                          "host:80", "a/b", "x;y", "fd00::zz"}) {
    SCOPED_TRACE(bad);
    StatusOr<std::string> s = NormalizeHost(bad, "SOME_VARIABLE");
    ASSERT_FALSE(s.ok());
    ExpectInvalidNaming(s.status(), "SOME_VARIABLE");
  }
  ExpectInvalidNaming(NormalizeHost(std::string(300, 'a'), "V").status(), "V");
}

TEST(HostAddressTest, ResolveKeepsNumericAddressesAndResolvesNames) {
  EXPECT_EQ(*ResolveHost("192.0.2.7", "V"), "192.0.2.7");
  EXPECT_EQ(*ResolveHost("fd00::7", "V"), "fd00::7");
  // /etc/hosts names localhost on every Linux system.
  StatusOr<std::string> local = ResolveHost("localhost", "V");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_TRUE(IsLoopbackAddress(*local)) << *local;
}

TEST(HostAddressTest, InterfaceAddressOfLoopbackAndOfNoInterface) {
  EXPECT_EQ(*InterfaceAddress("lo", "DMLC_INTERFACE"), "127.0.0.1");
  StatusOr<std::string> none = InterfaceAddress("no-such0", "DMLC_INTERFACE");
  ASSERT_FALSE(none.ok());
  ExpectInvalidNaming(none.status(), "DMLC_INTERFACE");
  EXPECT_NE(none.status().message().find("no such interface"),
            std::string::npos);
}

TEST(HostAddressTest, RouteToLoopbackIsLoopback) {
  EXPECT_EQ(*RouteAddress("127.0.0.1", 9000, "V"), "127.0.0.1");
  if (!HasIPv6Loopback()) GTEST_SKIP() << "no ::1 on this host";
  EXPECT_EQ(*RouteAddress("::1", 9000, "V"), "::1");
}

TEST(HostAddressTest, RouteToOwnAddressIsThatAddressNotLoopback) {
  // The kernel routes a host's own address through lo; the source it
  // picks is the address itself.
  for (int family : {AF_INET, AF_INET6}) {
    StatusOr<std::string> mine = FirstNonLoopbackAddress(family);
    if (!mine.ok()) continue;
    SCOPED_TRACE(*mine);
    StatusOr<std::string> route = RouteAddress(*mine, 9000, "V");
    ASSERT_TRUE(route.ok()) << route.status();
    EXPECT_EQ(*route, *mine);
    EXPECT_FALSE(IsLoopbackAddress(*route));
  }
}

TEST(HostAddressTest, RouteNeedsANumericAddress) {
  StatusOr<std::string> route =
      RouteAddress("scheduler", 9000, "DMLC_PS_ROOT_URI");
  ASSERT_FALSE(route.ok());
  ExpectInvalidNaming(route.status(), "DMLC_PS_ROOT_URI");
}

}  // namespace
}  // namespace ps
