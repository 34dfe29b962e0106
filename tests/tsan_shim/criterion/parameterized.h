/* Part of the TSan stand-in for Criterion: everything lives in criterion.h. */
#include "criterion.h"
