// emu/collsim/train.cpp — see train.hpp.
#include "emu/collsim/train.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <toml++/toml.h>

namespace weft::collsim {

namespace {

std::optional<std::size_t> size_of(std::string_view s) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return std::nullopt;
  std::size_t i = 0;
  std::size_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9')
    v = v * 10 + static_cast<std::size_t>(s[i++] - '0');
  const std::string_view rest = s.substr(i);
  if (rest.empty()) return v;
  if (rest == "K" || rest == "k") return v << 10;
  if (rest == "M" || rest == "m") return v << 20;
  if (rest == "G" || rest == "g") return v << 30;
  return std::nullopt;
}

std::string at(const std::string& file, const toml::node& n) {
  return file + ":" + std::to_string(n.source().begin.line) + ": ";
}

std::optional<double> number(const toml::node& n) {
  if (const auto* i = n.as_integer()) return static_cast<double>(i->get());
  if (const auto* d = n.as_floating_point()) return d->get();
  return std::nullopt;
}

}  // namespace

std::optional<TrainModel> parse_train_model(const std::string& text, const std::string& file,
                                            std::string& error) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    error =
        file + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description());
    return std::nullopt;
  }
  TrainModel m;
  auto positive = [&](const toml::node& n, const std::string& key, double& out) {
    const auto v = number(n);
    if (!v || !(*v > 0)) {
      error = at(file, n) + "\"" + key + "\" must be a positive number";
      return false;
    }
    out = *v;
    return true;
  };
  auto count = [&](const toml::node& n, const std::string& key, int& out) {
    const auto* i = n.as_integer();
    if (i == nullptr || i->get() < 1 || i->get() > (1 << 20)) {
      error = at(file, n) + "\"" + key + "\" must be a whole number of at least 1";
      return false;
    }
    out = static_cast<int>(i->get());
    return true;
  };
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (key == "name") {
      if (!node.is_string()) {
        error = at(file, node) + "\"name\" must be a string";
        return std::nullopt;
      }
      m.name = node.as_string()->get();
    } else if (key == "gpu_flops") {
      if (!positive(node, key, m.gpu_flops)) return std::nullopt;
    } else if (key == "tokens") {
      if (!positive(node, key, m.tokens)) return std::nullopt;
    } else if (key == "hidden") {
      if (!positive(node, key, m.hidden)) return std::nullopt;
    } else if (key == "dp") {
      if (!count(node, key, m.dp)) return std::nullopt;
    } else if (key == "tp") {
      if (!count(node, key, m.tp)) return std::nullopt;
    } else if (key == "pp") {
      if (!count(node, key, m.pp)) return std::nullopt;
    } else if (key == "microbatches") {
      if (!count(node, key, m.microbatches)) return std::nullopt;
    } else if (key == "dtype") {
      const auto t = node.is_string() ? parse_dtype(node.as_string()->get()) : std::nullopt;
      if (!t) {
        error = at(file, node) + "\"dtype\" must be a type such as bf16 or f32";
        return std::nullopt;
      }
      m.dtype = *t;
    } else if (key == "bucket") {
      std::optional<std::size_t> b;
      if (node.is_string()) b = size_of(node.as_string()->get());
      if (const auto* i = node.as_integer(); i != nullptr && i->get() > 0)
        b = static_cast<std::size_t>(i->get());
      if (!b || *b == 0) {
        error = at(file, node) + "\"bucket\" must be a size such as \"25M\"";
        return std::nullopt;
      }
      m.bucket_bytes = *b;
    } else if (key == "tp_comm") {
      const std::string v = node.is_string() ? std::string(node.as_string()->get()) : "";
      if (v != "allreduce" && v != "sequence") {
        error = at(file, node) + "\"tp_comm\" must be \"allreduce\" or \"sequence\"";
        return std::nullopt;
      }
      m.sequence_parallel = v == "sequence";
    } else if (key == "layers") {
      const auto* arr = node.as_array();
      if (arr == nullptr) {
        error = at(file, node) + "\"layers\" must be an array of tables ([[layers]])";
        return std::nullopt;
      }
      for (const auto& item : *arr) {
        const auto* t = item.as_table();
        if (t == nullptr) {
          error = at(file, item) + "each [[layers]] entry must be a table";
          return std::nullopt;
        }
        LayerSpec l;
        bool has_params = false, has_flops = false;
        for (const auto& [lk, ln] : *t) {
          const std::string lkey(lk.str());
          if (lkey == "count") {
            if (!count(ln, lkey, l.count)) return std::nullopt;
          } else if (lkey == "params") {
            if (!positive(ln, lkey, l.params)) return std::nullopt;
            has_params = true;
          } else if (lkey == "flops") {
            if (!positive(ln, lkey, l.flops)) return std::nullopt;
            has_flops = true;
          } else {
            error = at(file, ln) + "unknown key \"" + lkey + "\" in [[layers]]";
            return std::nullopt;
          }
        }
        if (!has_params || !has_flops) {
          error = at(file, item) + "a [[layers]] entry needs params and flops";
          return std::nullopt;
        }
        m.layers.push_back(l);
      }
    } else {
      error = at(file, node) + "unknown key \"" + key + "\"";
      return std::nullopt;
    }
  }
  if (m.layers.empty()) {
    error = file + ": the model has no [[layers]]";
    return std::nullopt;
  }
  if ((m.tp > 1 || m.pp > 1) && (m.tokens <= 0 || m.hidden <= 0)) {
    error = file + ": tensor or pipeline parallelism needs tokens and hidden (activation sizes)";
    return std::nullopt;
  }
  if (m.name.empty()) m.name = file;
  return m;
}

TrainOutcome run_train(const ClusterConfig& cluster, const RunConfig& run_in, const TrainModel& m) {
  const int g = cluster.gpus, n = cluster.nodes * cluster.gpus;
  if (m.dp * m.tp * m.pp != n) {
    return {std::nullopt, "dp x tp x pp = " + std::to_string(m.dp * m.tp * m.pp) +
                              " GPUs, but the cluster has " + std::to_string(n)};
  }
  if (g % m.tp != 0)
    return {std::nullopt, "tp = " + std::to_string(m.tp) + " must divide the " + std::to_string(g) +
                              " GPUs of a node (tensor parallelism stays "
                              "inside the NVLink domain)"};
  std::vector<LayerSpec> layers;
  for (const LayerSpec& l : m.layers)
    for (int i = 0; i < l.count; ++i) layers.push_back(l);
  const int nl = static_cast<int>(layers.size());
  if (m.pp > nl) return {std::nullopt, "pp is larger than the number of layers"};

  TrainReport rep;
  std::map<std::tuple<int, int, int, std::size_t>, double> cache;  // kind, nodes, gpus, bytes
  std::string err;
  auto coll_time = [&](coll::CollKind kind, int nodes, int gpus, coll::Algo algo,
                       std::size_t bytes) -> double {
    if (bytes == 0 || nodes * gpus < 2 || !err.empty()) return 0;
    const auto key = std::make_tuple(static_cast<int>(kind), nodes, gpus, bytes);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    ClusterConfig c = cluster;
    c.nodes = nodes;
    c.gpus = gpus;
    RunConfig r = run_in;
    r.kind = kind;
    r.algo = algo;
    r.dtype = m.dtype;
    r.op = coll::RedOp::kSum;
    r.verify = false;
    r.packet = false;
    r.faults = {};
    if (algo != coll::Algo::kAuto) r.channels = run_in.channels;
    const auto o = run_collective(c, r, bytes);
    if (!o.result) {
      err = o.error;
      return 0;
    }
    ++rep.simulations;
    if (kind == coll::CollKind::kAllReduce && nodes * gpus == m.dp) rep.dp_algo = o.result->algo;
    return cache[key] = o.result->time_s;
  };

  const std::size_t es = coll::elem_bytes(m.dtype);
  const double mb = m.microbatches;
  // Activations of one microbatch (one tensor-parallel collective; the whole buffer).
  const auto act = static_cast<std::size_t>(m.tokens / mb * m.hidden) * es;
  double tp_layer_fwd = 0, tp_layer_bwd = 0;
  if (m.tp > 1) {
    if (m.sequence_parallel) {
      const double ag = coll_time(coll::CollKind::kAllGather, 1, m.tp, coll::Algo::kAuto, act);
      const double rs = coll_time(coll::CollKind::kReduceScatter, 1, m.tp, coll::Algo::kAuto, act);
      tp_layer_fwd = tp_layer_bwd = 2 * (ag + rs);
      rep.tp_collectives = 8 * nl / m.pp * m.microbatches;
    } else {
      const double ar = coll_time(coll::CollKind::kAllReduce, 1, m.tp, coll::Algo::kAuto, act);
      tp_layer_fwd = tp_layer_bwd = 2 * ar;
      rep.tp_collectives = 4 * nl / m.pp * m.microbatches;
    }
    rep.tp_bytes = act;
  }
  // Pipeline: each microbatch's activations (forward) and their gradients (backward) cross
  // each stage boundary once, 1/tp of them from each tensor-parallel rank over its NIC.
  const double p2p =
      m.pp > 1 ? static_cast<double>(act) / m.tp / cluster.nic_Bps + cluster.nic_latency_s : 0;

  // Per stage, per microbatch: forward and backward (2 x forward) of its layers, plus the
  // tensor-parallel collectives and the pipeline sends, all on the critical path.
  struct Stage {
    int first, last;  // layers [first, last)
    double fwd = 0, bwd = 0, compute_fwd = 0;
  };
  std::vector<Stage> stages;
  for (int s = 0; s < m.pp; ++s) {
    Stage st{s * nl / m.pp, (s + 1) * nl / m.pp};
    for (int i = st.first; i < st.last; ++i) {
      const double f = layers[static_cast<std::size_t>(i)].flops / (m.tp * m.gpu_flops * mb);
      st.compute_fwd += f;
      st.fwd += f + tp_layer_fwd;
      st.bwd += 2 * f + tp_layer_bwd;
    }
    st.fwd += p2p;
    st.bwd += p2p;
    stages.push_back(st);
  }
  const Stage* busiest = &stages.front();
  for (const Stage& st : stages)
    if (st.fwd + st.bwd > busiest->fwd + busiest->bwd) busiest = &st;
  const double per_mb = busiest->fwd + busiest->bwd;
  // GPipe and 1F1B share the bubble: (pp - 1) microbatch slots of the busiest stage.
  const double t_end = (mb + m.pp - 1) * per_mb;
  rep.forward_s = mb * busiest->compute_fwd;
  rep.backward_s = 2 * rep.forward_s;
  rep.compute_s = rep.forward_s + rep.backward_s;
  rep.bubble_s = (m.pp - 1) * per_mb;
  rep.tp_comm_s = mb * (tp_layer_fwd + tp_layer_bwd) * (busiest->last - busiest->first);
  rep.pp_comm_s = m.pp > 1 ? mb * 2 * p2p : 0;

  // Data parallel: the gradients of stage 0 (the last to finish its backward) in buckets, in
  // backward (reverse layer) order, during the last microbatch's backward pass; one all-reduce
  // at a time on the communication stream. The group: ranks with the same tensor-parallel index
  // and stage; g / tp of them share a node.
  rep.dp_gpus = std::min(m.dp, g / m.tp);
  rep.dp_nodes = m.dp / rep.dp_gpus;
  const Stage& s0 = stages.front();
  double t = t_end - s0.bwd + p2p;  // the last backward of stage 0 starts here
  std::size_t pending = 0;
  double stream = 0;
  auto flush = [&](double ready) {
    if (pending == 0) return;
    Bucket b{.bytes = pending, .ready_s = ready};
    const double d = m.dp > 1 ? coll_time(coll::CollKind::kAllReduce, rep.dp_nodes, rep.dp_gpus,
                                          run_in.algo, pending)
                              : 0;
    b.start_s = std::max(ready, stream);
    b.end_s = b.start_s + d;
    stream = b.end_s;
    rep.dp_comm_s += d;
    rep.buckets.push_back(b);
    pending = 0;
  };
  for (int i = s0.last - 1; i >= s0.first; --i) {
    const LayerSpec& l = layers[static_cast<std::size_t>(i)];
    t += 2 * l.flops / (m.tp * m.gpu_flops * mb) + tp_layer_bwd;
    pending += static_cast<std::size_t>(std::ceil(l.params / m.tp)) * es;
    if (pending >= m.bucket_bytes) flush(t);
  }
  flush(t);
  if (!err.empty()) return {std::nullopt, err};
  if (m.dp == 1) rep.buckets.clear();
  rep.step_s = std::max(t_end, stream);
  rep.dp_exposed_s = rep.step_s - t_end;
  rep.comm_s = rep.tp_comm_s + rep.pp_comm_s + rep.dp_comm_s;
  rep.exposed_comm_s = rep.tp_comm_s + rep.pp_comm_s + rep.dp_exposed_s;
  return {rep, ""};
}

}  // namespace weft::collsim
