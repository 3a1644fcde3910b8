// Host addresses: which address a node binds and which it announces.
//
// Options::FromEnvironment uses these once, at start-up
// (docs/configuration.md, "Addresses"). Functions of the host's interfaces,
// its routing table and its resolver; none sends a packet. All are
// thread-safe; ResolveHost blocks while a name is looked up.
#ifndef PS_NODE_HOST_ADDRESS_H_
#define PS_NODE_HOST_ADDRESS_H_

#include <string>

#include "ps/status.h"

namespace ps {

// True if `host` is a numeric IPv4 or IPv6 address (an IPv6 one without
// brackets).
bool IsNumericAddress(const std::string& host);

// True if `host` is a numeric IPv6 address.
bool IsIPv6Address(const std::string& host);

// True if `host` is a numeric loopback address (127.0.0.0/8, ::1, or an
// IPv4-mapped 127.x). Names are not resolved: "localhost" is false.
bool IsLoopbackAddress(const std::string& host);

// Checks and normalizes a host setting: a name (letters, digits, '-', '.',
// '_'), a numeric IPv4 address, or an IPv6 one, with or without brackets
// (returned without them; a zone such as "%eth0" is kept). `variable` names
// the setting in the kInvalidArgument it returns otherwise.
[[nodiscard]] StatusOr<std::string> NormalizeHost(const std::string& host,
                                                  const std::string& variable);

// The numeric address `host` resolves to (getaddrinfo, any family, the
// first answer in the resolver's order); a numeric `host` is returned as
// is. kInvalidArgument naming `variable` if it does not resolve.
[[nodiscard]] StatusOr<std::string> ResolveHost(const std::string& host,
                                                const std::string& variable);

// The first IPv4 address of interface `name`, or if it has none, its
// first IPv6 address outside fe80::/10 (a link-local address would need
// its zone on every peer). kInvalidArgument naming `variable` if there is
// no such interface or it has no usable address.
[[nodiscard]] StatusOr<std::string> InterfaceAddress(
    const std::string& name, const std::string& variable);

// The address of this host's interface on the route to the numeric
// address `destination`: a UDP socket is connected (which sends nothing)
// and asked for its own address. If the kernel answers with a loopback
// address although `destination` is not one, the first non-loopback
// address of the same family is returned instead. kInvalidArgument naming
// `variable` if there is no route.
[[nodiscard]] StatusOr<std::string> RouteAddress(const std::string& destination,
                                                 int port,
                                                 const std::string& variable);

// The first address of an interface that is up, not loopback, of the
// given family (AF_INET or AF_INET6; for IPv6, outside fe80::/10).
// kUnavailable if there is none.
[[nodiscard]] StatusOr<std::string> FirstNonLoopbackAddress(int family);

}  // namespace ps

#endif  // PS_NODE_HOST_ADDRESS_H_
