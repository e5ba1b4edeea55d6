// switchyard: one binary, one subcommand per job. Bad flags or input: one line on stderr, exit 2. A rank of a
// multi-rank run that fails says so and ends every rank (launch.h).
#include <cstdio>

#include "apps/commands.h"
#include "apps/launch.h"
#include "base/check.h"

int main(int argc, char** argv) {
  sy::Launch launch(argc, argv);
  CLI::App app{"switchyard: Mixture-of-Experts inference engine"};
  app.require_subcommand(1);
  const sy::CommandMain generate = sy::add_generate_command(app, launch);
  const sy::CommandMain plan = sy::add_plan_command(app);
  const sy::CommandMain inspect = sy::add_inspect_command(app);
  const sy::CommandMain tokenize = sy::add_tokenize_command(app);
  const sy::CommandMain serve = sy::add_serve_command(app, launch);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  const sy::CommandMain bench_latency = sy::add_bench_latency_command(*bench, launch);
  const sy::CommandMain bench_comm = sy::add_bench_comm_command(*bench, launch);
  const sy::CommandMain bench_calibrate = sy::add_bench_calibrate_command(*bench, launch);
  const sy::CommandMain bench_tokenize = sy::add_bench_tokenize_command(*bench);
  const sy::CommandMain bench_serve = sy::add_bench_serve_command(*bench);
  const sy::CommandMain bench_soak = sy::add_bench_soak_command(*bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "switchyard: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    if (app.got_subcommand("generate")) return generate();
    if (app.got_subcommand("plan")) return plan();
    if (app.got_subcommand("inspect")) return inspect();
    if (app.got_subcommand("tokenize")) return tokenize();
    if (app.got_subcommand("serve")) return serve();
    if (bench->got_subcommand("latency")) return bench_latency();
    if (bench->got_subcommand("comm")) return bench_comm();
    if (bench->got_subcommand("calibrate")) return bench_calibrate();
    if (bench->got_subcommand("tokenize")) return bench_tokenize();
    if (bench->got_subcommand("serve")) return bench_serve();
    if (bench->got_subcommand("soak")) return bench_soak();
  } catch (const sy::Error& e) {
    return launch.fail(e.what(), false);
  } catch (const std::exception& e) {
    return launch.fail(e.what(), true);
  }
  return 2;
}
