// Subcommands of the switchyard binary; each registers its flags and returns the function to run.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace sy {

using CommandMain = std::function<int()>;

CommandMain add_generate_command(CLI::App& app);

}  // namespace sy
