// Everything the hopper client offers, in one include.
#pragma once

#include "hopper/client.hpp"
#include "hopper/connection.hpp"
#include "hopper/error.hpp"
#include "hopper/json.hpp"
#include "hopper/take_worker.hpp"
#include "hopper/types.hpp"
#include "hopper/utf8.hpp"
#include "hopper/worker.hpp"
