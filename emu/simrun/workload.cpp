// emu/simrun/workload.cpp — parsing workload specs (see simrun.hpp).
#include <charconv>

#include "emu/simrun/simrun.hpp"

namespace weft::simrun {

namespace {

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> parse_size(std::string_view s) {
  std::uint64_t mul = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) mul = 1024;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) mul = 1024 * 1024;
  if (mul != 1) s.remove_suffix(1);
  const auto v = parse_u64(s);
  if (!v) return std::nullopt;
  return *v * mul;
}

}  // namespace

const char* to_string(WorkloadSpec::Op op) {
  switch (op) {
    case WorkloadSpec::Op::kWrite:
      return "write";
    case WorkloadSpec::Op::kRead:
      return "read";
    case WorkloadSpec::Op::kSend:
      return "send";
  }
  return "?";
}

Result<WorkloadSpec, std::string> parse_workload(std::string_view spec) {
  WorkloadSpec w;
  const std::size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  std::string_view rest = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  if (kind == "pairs") {
    w.kind = WorkloadSpec::Kind::kPairs;
  } else if (kind == "all-to-all") {
    w.kind = WorkloadSpec::Kind::kAllToAll;
  } else if (kind == "incast") {
    w.kind = WorkloadSpec::Kind::kIncast;
    const std::size_t comma = rest.find(',');
    const auto n = parse_u64(rest.substr(0, comma));
    if (!n || *n == 0 || *n > 65536) {
      return std::string("incast needs its sender count first, e.g. incast:8");
    }
    w.incast_senders = static_cast<std::uint32_t>(*n);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  } else if (kind == "permutation") {
    w.kind = WorkloadSpec::Kind::kPermutation;
  } else {
    return "unknown workload \"" + std::string(kind) +
           "\" (pairs, all-to-all, incast:N, permutation)";
  }
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) return "\"" + std::string(item) + "\" is not key=value";
    const std::string key(item.substr(0, eq));
    const std::string_view val = item.substr(eq + 1);
    if (key == "flows" && w.kind == WorkloadSpec::Kind::kPairs) {
      std::string_view fl = val;
      while (!fl.empty()) {
        const std::size_t plus = fl.find('+');
        const std::string_view pair = fl.substr(0, plus);
        fl = plus == std::string_view::npos ? "" : fl.substr(plus + 1);
        const std::size_t c = pair.find(':');
        const auto a = parse_u64(pair.substr(0, c));
        const auto b = c == std::string_view::npos ? std::nullopt : parse_u64(pair.substr(c + 1));
        if (!a || !b || *a == *b || *a > UINT32_MAX || *b > UINT32_MAX) {
          return "flow \"" + std::string(pair) + "\" is not SRC:DST (two different HCA indices)";
        }
        w.flows.emplace_back(static_cast<std::uint32_t>(*a), static_cast<std::uint32_t>(*b));
      }
    } else if (key == "size") {
      const auto v = parse_size(val);
      if (!v || *v == 0 || *v > (1u << 30))
        return std::string("size must be 1..1G bytes (K, M suffixes)");
      w.size_bytes = static_cast<std::uint32_t>(*v);
    } else if (key == "mtu") {
      const auto v = parse_u64(val);
      bool ok = false;
      for (Mtu m : {Mtu::k256, Mtu::k512, Mtu::k1024, Mtu::k2048, Mtu::k4096}) {
        if (v && *v == mtu_bytes(m)) {
          w.mtu = m;
          ok = true;
        }
      }
      if (!ok) return std::string("mtu must be 256, 512, 1024, 2048 or 4096");
    } else if (key == "depth") {
      const auto v = parse_u64(val);
      if (!v || *v == 0 || *v > 256) return std::string("depth must be 1..256");
      w.depth = static_cast<std::uint32_t>(*v);
    } else if (key == "fanout" && w.kind == WorkloadSpec::Kind::kAllToAll) {
      const auto v = parse_u64(val);
      if (!v || *v == 0 || *v > 65535) return std::string("fanout must be 1..65535");
      w.fanout = static_cast<std::uint32_t>(*v);
    } else if (key == "op") {
      if (val == "write") {
        w.op = WorkloadSpec::Op::kWrite;
      } else if (val == "read") {
        w.op = WorkloadSpec::Op::kRead;
      } else if (val == "send") {
        w.op = WorkloadSpec::Op::kSend;
      } else {
        return std::string("op must be write, read or send");
      }
    } else if (key == "duration") {
      const auto t = faults::parse_time(val);
      if (!t || *t == 0) return std::string("duration must be a time such as 300us");
      w.duration_ns = *t;
    } else {
      return "unknown workload key \"" + key + "\"";
    }
  }
  if (w.kind == WorkloadSpec::Kind::kPairs && w.flows.empty()) {
    return std::string("pairs needs flows=SRC:DST[+SRC:DST...]");
  }
  return w;
}

}  // namespace weft::simrun
