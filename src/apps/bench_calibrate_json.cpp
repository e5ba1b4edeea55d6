// The machine profile `bench calibrate` writes, as JSON: {"format": "switchyard-profile", "version": 1, machine,
// rates, step, ops, ops_alone (CPU ranks only), collectives, skipped}; every time in microseconds per call (4
// significant digits), every dim an integer. The text keeps that order and puts each point on a line of its own.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "apps/bench_calibrate.h"

namespace sy {

namespace {

// A time to 4 significant digits (a median of a few batches carries no more).
double rounded(double us) { return std::isfinite(us) ? std::stod(fmt::format("{:.4g}", us)) : us; }

// [d1, ..., dn, us]: the dims as integers, the time last.
nlohmann::ordered_json point_row(const TimedPoint& p) {
  nlohmann::ordered_json row = nlohmann::ordered_json::array();
  for (int64_t d : p.dims) row.push_back(d);
  row.push_back(rounded(p.us));
  return row;
}

nlohmann::ordered_json points_json(const std::vector<TimedPoint>& points) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const TimedPoint& p : points) rows.push_back(point_row(p));
  return rows;
}

// {"name": {"dims": [...], "points": [\n [..],\n ...]}, ...} with one line per point.
void append_tables(std::string& out, const nlohmann::ordered_json& tables) {
  if (tables.empty()) {
    out += "{}";
    return;
  }
  out += "{";
  const char* sep = "\n";
  for (const auto& [name, t] : tables.items()) {
    out += fmt::format("{}  {}: {{\"dims\": {}, \"points\": [", sep, nlohmann::json(name).dump(), t["dims"].dump());
    const char* row_sep = "\n";
    for (const auto& row : t["points"]) {
      out += fmt::format("{}   {}", row_sep, row.dump());
      row_sep = ",\n";
    }
    out += t["points"].empty() ? "]}" : "\n  ]}";
    sep = ",\n";
  }
  out += "\n }";
}

}  // namespace

nlohmann::ordered_json profile_json(const CalibrationProfile& p) {
  const MachineSection& m = p.machine;
  nlohmann::ordered_json out = {{"format", "switchyard-profile"}, {"version", 1}};
  out["machine"] = {{"device", m.device},
                    {"name", m.name},
                    {"memory_gb", m.memory_gb},
                    {"host", m.host},
                    {"cpu_threads", m.cpu_threads},
                    {"ranks", m.ranks},
                    {"transport", m.transport},
                    {"date", m.date},
                    {"quick", m.quick},
                    {"passes", m.passes},
                    {"weight_dtype", m.weight_dtype}};
  if (!m.models.empty()) out["machine"]["models"] = m.models;
  if (m.cache_mb > 0) out["machine"]["cache_mb"] = rounded(m.cache_mb);
  if (m.cold_pool_mb > 0) out["machine"]["cold_pool_mb"] = m.cold_pool_mb;
  out["machine"]["recheck"] = {{"retimed", m.recheck.retimed}, {"faster", m.recheck.faster}, {"left", m.recheck.left}};
  out["rates"] = {{"copy_gb_s", rounded(p.copy_gb_s)}, {"matrix_tflop_s", rounded(p.matrix_tflop_s)}};
  out["step"] = {{"launch_us", rounded(p.step.launch_us)},
                 {"sync_us", rounded(p.step.sync_us)},
                 {"graph_launch_us", rounded(p.step.graph_launch_us)},
                 {"copy_to_host_us", rounded(p.step.copy_to_host_us)}};
  if (!p.step.skew.empty()) {
    nlohmann::ordered_json skew = nlohmann::ordered_json::array();
    for (const auto& [us, f] : p.step.skew) skew.push_back({rounded(us), rounded(f)});
    out["step"]["skew"] = skew;
  }
  if (!p.step.skew_cold.empty()) {
    nlohmann::ordered_json skew = nlohmann::ordered_json::array();
    for (const SkewColdPoint& k : p.step.skew_cold) {
      skew.push_back({rounded(k.rows), rounded(k.segment_us), rounded(k.fraction)});
    }
    out["step"]["skew_cold"] = skew;
  }
  nlohmann::ordered_json ops = nlohmann::ordered_json::object();
  for (const MeasuredOp& t : p.ops) ops[t.op] = {{"dims", t.dims}, {"points", points_json(t.points)}};
  out["ops"] = ops;
  // CPU ranks: each point's time with rank 0 working alone, where it was timed (the planner's steps in which only
  // some ranks work).
  nlohmann::ordered_json alone = nlohmann::ordered_json::object();
  for (const MeasuredOp& t : p.ops) {
    std::vector<TimedPoint> points;
    for (const TimedPoint& pt : t.points) {
      if (pt.alone_us > 0) points.push_back({.dims = pt.dims, .us = pt.alone_us});
    }
    if (!points.empty()) alone[t.op] = {{"dims", t.dims}, {"points", points_json(points)}};
  }
  if (!alone.empty()) out["ops_alone"] = alone;
  nlohmann::ordered_json collectives = nlohmann::ordered_json::object();
  for (const CollectiveTable& t : p.collectives) {
    collectives[t.kind] = {{"dims", {"ranks", "bytes"}}, {"points", points_json(t.points)}};
  }
  out["collectives"] = collectives;
  nlohmann::ordered_json skipped = nlohmann::ordered_json::array();
  for (const SkippedPoint& s : p.skipped) skipped.push_back({{"op", s.op}, {"point", s.point}, {"why", s.why}});
  out["skipped"] = skipped;
  return out;
}

std::string profile_text(const CalibrationProfile& p) {
  const nlohmann::ordered_json j = profile_json(p);
  std::string out = "{\n";
  for (const char* key : {"format", "version", "machine", "rates", "step"}) {
    out += fmt::format(" \"{}\": {},\n", key, j[key].dump());
  }
  for (const char* key : {"ops", "ops_alone", "collectives"}) {
    if (!j.contains(key)) continue;
    out += fmt::format(" \"{}\": ", key);
    append_tables(out, j[key]);
    out += ",\n";
  }
  out += " \"skipped\": [";
  const char* sep = "\n";
  for (const auto& s : j["skipped"]) {
    out += fmt::format("{}  {}", sep, s.dump());
    sep = ",\n";
  }
  out += j["skipped"].empty() ? "]\n}\n" : "\n ]\n}\n";
  return out;
}

}  // namespace sy
