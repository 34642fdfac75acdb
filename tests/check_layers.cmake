# tests/check_layers.cmake — attend's headers in layers, bottom to top: a header includes only headers of its own layer
# or of a layer below it (docs/ARCHITECTURE.md, "The layers").
#
#   cmake -DROOT=<attend's source dir> -P tests/check_layers.cmake      (CTest: the test `layers`)
#
# Every file under include/attend/ must match an entry of the table below; each of its `#include <attend/...>` lines
# is looked up in the same table, and an include of a higher layer, a file that matches no entry, an included header
# that does not exist or an attend header included with quotes fails the check, naming the file, the included header
# and both layers. A new header is placed by adding it to the table.

# ---- the layer table: the one place the layers are written down ---------------------------------------------------
# The layers, bottom (0) to top.
set(layer_names
  "foundation"           # 0: tensors, masks, score options, the ISA choice, threads, random numbers, tuning, views
  "kernels"              # 1: the per-level code (Simd, the -inl kernels, their table) and what the kernels read
  "drivers"              # 2: the attention algorithms and products that run the kernels over whole tensors
  "functions"            # 3: the public functions and the value types of their calls
  "modules"              # 4: the modules, their parameters, state dict and workspace, and their scaffolding
  "weights and training" # 5: weights in and out of files and PyTorch, optimizers, losses
  "umbrella"             # 6: attend.hpp
)
# Pairs of (layer, regular expression on the path under include/attend/); the first entry that matches a path places
# it, and an entry that matches no file fails the check (a stale entry).
set(layer_table
  0 "^(config|tensor|isa|threads|random|valid_lens|mask|score_options)\\.hpp$"
  0 "^detail/(tuning|philox|heads|views|packet_buffer|projection)\\.hpp$"

  1 "^detail/(generic|avx2|avx512|avx512_bf16|kernels)/[^/]+\\.hpp$"
  1 "^detail/(target|kernels|operands|mask_row|softmax|attention_dropout|bf16_blocks)\\.hpp$"
  1 "^separate_kernels\\.hpp$"

  2 "^detail/core/[^/]+\\.hpp$"
  2 "^detail/(attend_rows|attention_backward)\\.hpp$"
  2 "^detail/(products|project_rows|bf16_products|transpose|transposed_weight|normalization|ring_layout)\\.hpp$"

  3 "^(masked_softmax|scaled_dot_product_attention|transpose_qkv|rotary_embedding|kv_cache)\\.hpp$"
  3 "^(attention_path|attention_gradients|complexity|activation|sampling)\\.hpp$"

  4 "^detail/modules/[^/]+\\.hpp$"
  4 "^(module|parameter|state_dict|workspace|linear|dropout|positional_encoding)\\.hpp$"
  4 "^(dot_product_attention|multi_head_attention|grouped_query_attention|additive_attention)\\.hpp$"
  4 "^(rnn|conv1d|sequence_encoders)\\.hpp$"
  4 "^(embedding|layer_norm|rms_norm|position_wise_ffn|gated_ffn|add_norm|transformer_encoder_block)\\.hpp$"
  4 "^(transformer_encoder|transformer_decoder|causal_lm)\\.hpp$"

  5 "^(safetensors|from_torch|from_transformers|optim|loss|distributed)\\.hpp$"
  5 "^distributed/[^/]+\\.hpp$"

  6 "^attend\\.hpp$"
)
# ---------------------------------------------------------------------------------------------------------------------

if(NOT DEFINED ROOT)
  message(FATAL_ERROR "layers: run as cmake -DROOT=<attend's source dir> -P check_layers.cmake")
endif()
set(include_dir "${ROOT}/include/attend")
if(NOT IS_DIRECTORY "${include_dir}")
  message(FATAL_ERROR "layers: no directory ${include_dir}")
endif()

list(LENGTH layer_table table_length)
math(EXPR last_pair "${table_length} / 2 - 1")

# layer_of(<path under include/attend/> <out layer> <out entry>): the first entry matching path, or -1 for none.
function(layer_of path out_layer out_entry)
  set(${out_layer} -1 PARENT_SCOPE)
  set(${out_entry} -1 PARENT_SCOPE)
  foreach(pair RANGE 0 ${last_pair})
    math(EXPR at "${pair} * 2")
    math(EXPR pattern_at "${at} + 1")
    list(GET layer_table ${pattern_at} pattern)
    if(path MATCHES "${pattern}")
      list(GET layer_table ${at} layer)
      set(${out_layer} ${layer} PARENT_SCOPE)
      set(${out_entry} ${pair} PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

function(describe layer out)
  list(GET layer_names ${layer} name)
  set(${out} "layer ${layer} (${name})" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE headers LIST_DIRECTORIES false RELATIVE "${include_dir}" "${include_dir}/*")
list(SORT headers)

set(errors "")
set(used_entries "")
list(LENGTH headers header_count)
set(include_count 0)
foreach(header IN LISTS headers)
  layer_of("${header}" layer entry)
  if(layer EQUAL -1)
    string(APPEND errors "\n  include/attend/${header} matches no layer: add it to the table in tests/check_layers.cmake")
    continue()
  endif()
  list(APPEND used_entries ${entry})
  describe(${layer} header_layer)

  file(STRINGS "${include_dir}/${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\"")
      string(APPEND errors "\n  include/attend/${header} includes \"${CMAKE_MATCH_1}\" in quotes: spell an attend header "
                           "<attend/...>, the only form this check reads")
      continue()
    endif()
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*<attend/([^>]+)>")
      continue()  # a header of the standard library, Eigen, ...
    endif()
    set(included "${CMAKE_MATCH_1}")
    math(EXPR include_count "${include_count} + 1")
    if(NOT EXISTS "${include_dir}/${included}")
      string(APPEND errors "\n  include/attend/${header}, in ${header_layer}, includes <attend/${included}>, which "
                           "does not exist")
      continue()
    endif()
    layer_of("${included}" included_layer included_entry)
    if(included_layer EQUAL -1)
      continue()  # reported once, as a header that matches no layer
    endif()
    if(included_layer GREATER layer)
      describe(${included_layer} included_name)
      string(APPEND errors "\n  include/attend/${header}, in ${header_layer}, includes <attend/${included}>, in "
                           "${included_name}: a layer above its own")
    endif()
  endforeach()
endforeach()

foreach(pair RANGE 0 ${last_pair})
  list(FIND used_entries ${pair} found)
  if(found EQUAL -1)
    math(EXPR at "${pair} * 2")
    math(EXPR pattern_at "${at} + 1")
    list(GET layer_table ${at} layer)
    list(GET layer_table ${pattern_at} pattern)
    string(APPEND errors "\n  the table's entry ${layer} \"${pattern}\" places no header: remove it or fix it")
  endif()
endforeach()

if(NOT errors STREQUAL "")
  message(FATAL_ERROR "layers: attend's headers break their layers (tests/check_layers.cmake):${errors}")
endif()
message(STATUS "layers: ${header_count} headers, ${include_count} includes of attend headers, none going up a layer")
