#pragma once
// Everything in framework/nn.
#include "framework/nn/basic.h"
#include "framework/nn/batchnorm.h"
#include "framework/nn/conv.h"
#include "framework/nn/init.h"
#include "framework/nn/linear.h"
#include "framework/nn/graph.h"
#include "framework/nn/module.h"
#include "framework/nn/sequential.h"
