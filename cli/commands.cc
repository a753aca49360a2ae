#include "command.h"

namespace anneal::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = [] {
    std::vector<Command> all;
    add_store_commands(all);
    add_crypto_commands(all);
    add_train_commands(all);
    add_quantize_commands(all);
    add_job_commands(all);
    add_audit_commands(all);
    add_serve_commands(all);
    return all;
  }();
  return kCommands;
}

}  // namespace anneal::cli
