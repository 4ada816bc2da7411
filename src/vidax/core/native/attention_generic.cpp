// The fused CPU attention kernel compiled for one instruction set (flags in CMakeLists.txt).
#define VIDAX_ISA_NAMESPACE generic
#define VIDAX_LANES 4
#define VIDAX_ROWS 4
#include "attention_kernel.h"
