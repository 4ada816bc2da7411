// The fused CPU attention kernel compiled for one instruction set (flags in CMakeLists.txt).
#define VIDAX_ISA_NAMESPACE avx512
#define VIDAX_LANES 16
#define VIDAX_ROWS 12
#include "attention_kernel.h"
