// The function each object of the ODR test defines: the seed's multi-head self-attention, evaluated.
#pragma once

float seed_attention_x86_64();     // attention.cpp compiled with -march=x86-64
float seed_attention_x86_64_v4();  // attention.cpp compiled with -march=x86-64-v4
