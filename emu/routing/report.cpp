// emu/routing/report.cpp — see report.hpp.
#include "emu/routing/report.hpp"

#include <time.h>

namespace weft::routing {

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

bool EngineReport::valid() const {
  if (!routed) return false;
  const bool promises_deadlock_freedom = engine != Engine::kMinHop;
  return check.unreachable_pairs == 0 && check.switch_unreachable == 0 && check.loops == 0 &&
         check.too_long == 0 && (!promises_deadlock_freedom || !check.credit_loop);
}

EngineReport evaluate_engine(const Fabric& fabric, const LidMap& lids, const RoutingOptions& opt) {
  EngineReport r;
  r.engine = opt.engine;
  const double t0 = thread_cpu_s();
  auto routes = route(fabric, lids, opt);
  const double t1 = thread_cpu_s();
  r.route_cpu_s = t1 - t0;
  if (!routes.ok()) {
    r.refusal = routes.error().message;
    return r;
  }
  r.routed = true;
  r.vls = routes.value().vls;
  r.check = check_routes(fabric, lids, routes.value());
  r.check_cpu_s = thread_cpu_s() - t1;
  r.stats = routing_stats(fabric, lids, routes.value());
  return r;
}

}  // namespace weft::routing
