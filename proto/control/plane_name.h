// The names of a switch's data planes (docs/switch.md, "Data planes"). A
// switch run with `planes: N` is N switches to the fabric, one per plane,
// each with its own ports, QPs, groups and data-plane thread: plane 0 keeps
// the switch's name, plane p > 0 is "NAME@p". A topology's own names never
// hold an '@' (they are [A-Za-z0-9._-]), so a plane's name cannot collide
// with a switch's. The manager and the switch build the names with this one
// function.
//
//   PlaneSwitchName("leaf0", 0) == "leaf0";  PlaneSwitchName("leaf0", 2) == "leaf0@2"
//   SplitPlaneSwitchName("leaf0@2") == {"leaf0", 2}
//
// Thread-safe (pure functions).
#ifndef NETFOLD_PROTO_CONTROL_PLANE_NAME_H_
#define NETFOLD_PROTO_CONTROL_PLANE_NAME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace netfold::control {

// A switch runs at most this many planes: one thread each.
inline constexpr uint32_t kMaxPlanes = 16;

inline std::string PlaneSwitchName(std::string_view name, uint32_t plane) {
  std::string out(name);
  if (plane != 0) out += "@" + std::to_string(plane);
  return out;
}

// {switch name, plane} of a plane's name; a name without '@' is plane 0.
// nullopt for a malformed suffix ("a@", "a@0", "a@01", "a@x", a plane of
// kMaxPlanes or more).
inline std::optional<std::pair<std::string, uint32_t>> SplitPlaneSwitchName(
    std::string_view name) {
  const size_t at = name.find('@');
  if (at == std::string_view::npos) return std::make_pair(std::string(name), 0u);
  const std::string_view digits = name.substr(at + 1);
  if (at == 0 || digits.empty() || digits.size() > 2 || digits[0] == '0') return std::nullopt;
  uint32_t plane = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return std::nullopt;
    plane = plane * 10 + static_cast<uint32_t>(ch - '0');
  }
  if (plane >= kMaxPlanes) return std::nullopt;
  return std::make_pair(std::string(name.substr(0, at)), plane);
}

}  // namespace netfold::control

#endif  // NETFOLD_PROTO_CONTROL_PLANE_NAME_H_
