#pragma once
// Everything in modules/quant.
#include "modules/quant/fake_quant.h"
#include "modules/quant/histogram_observer.h"
#include "modules/quant/learnable_quantizer.h"
#include "modules/quant/observer.h"
#include "modules/quant/prepare.h"
#include "modules/quant/qat_layers.h"
#include "modules/quant/qconfig.h"
#include "modules/quant/qparams.h"
#include "modules/quant/quantizer.h"
#include "modules/quant/spec.h"
#include "modules/quant/stubs.h"
