// attend/module.hpp — what every module shares: training or evaluation mode.
//
// Modules are constructed in training mode, like PyTorch's; eval() turns dropout off.
#pragma once

#include <attend/config.hpp>

namespace attend {
inline namespace ATTEND_ABI {

class Module {
 public:
  void train(bool training = true) { training_ = training; }
  void eval() { training_ = false; }
  bool is_training() const { return training_; }

 private:
  bool training_ = true;
};

}  // namespace ATTEND_ABI
}  // namespace attend
