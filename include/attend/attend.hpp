// attend/attend.hpp — everything attend offers. Defines nothing itself.
#pragma once

#include <attend/additive_attention.hpp>
#include <attend/attention_path.hpp>
#include <attend/complexity.hpp>
#include <attend/conv1d.hpp>
#include <attend/dot_product_attention.hpp>
#include <attend/dropout.hpp>
#include <attend/from_torch.hpp>
#include <attend/linear.hpp>
#include <attend/mask.hpp>
#include <attend/masked_softmax.hpp>
#include <attend/module.hpp>
#include <attend/multi_head_attention.hpp>
#include <attend/positional_encoding.hpp>
#include <attend/random.hpp>
#include <attend/rnn.hpp>
#include <attend/safetensors.hpp>
#include <attend/sequence_encoders.hpp>
#include <attend/state_dict.hpp>
#include <attend/tensor.hpp>
#include <attend/threads.hpp>
#include <attend/transpose_qkv.hpp>
#include <attend/valid_lens.hpp>
#include <attend/workspace.hpp>
