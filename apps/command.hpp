// Subcommands of the llmk tool register themselves here: each cmd_*.cpp
// defines one static CommandRegistration. main() builds the CLI from them.
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace llmk::app {

// Adds the subcommand's options to `cmd` and returns the function that runs
// it after parsing (its return value is the exit status).
using CommandSetup = std::function<std::function<int()>(CLI::App& cmd)>;

struct CommandRegistration {
  CommandRegistration(std::string name, std::string description, CommandSetup setup);
};

}  // namespace llmk::app
