// The fused CPU attention kernel compiled for one instruction set (flags in CMakeLists.txt).
#define VIDAX_ISA_NAMESPACE avx2
#define VIDAX_LANES 8
#define VIDAX_ROWS 6
#include "attention_kernel.h"
