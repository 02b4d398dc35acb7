#pragma once
// Everything in framework/io: checkpoint files (header + CRC + Boost archive payload) and the
// helpers that capture and restore models, optimizers and generators.
#include "framework/io/atomic_file.h"
#include "framework/io/checkpoint.h"
#include "framework/io/checkpoint_error.h"
#include "framework/io/crc32.h"
#include "framework/io/format.h"
#include "framework/io/restore.h"
