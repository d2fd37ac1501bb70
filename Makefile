# hopper: a durable job queue inside PostgreSQL.
#
#   make            build the extension (PGXS) and the C++ client, CLI and transcoder (CMake)
#   make install    install the extension into the system PostgreSQL 15 (and the client into /usr/local)
#   make test       everything: set-up, build, a throwaway cluster, pg_regress, isolation, TAP, GoogleTest, e2e
#   make demo       the main job: a local cluster, a generated clip transcoded to HLS by hopper-transcode
#   make bench      the performance suite (bench/), report under bench/results/
#   make bench-peers  hopper against pg-boss and Graphile Worker, bench/results/PEERS.md

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config

MODULE_big = hopper
OBJS = $(patsubst %.cpp,%.o,$(sort $(wildcard extension/src/*.cpp)))
# EXTENSION is left unset because the control file lives in extension/, not the top level.
MODULEDIR = extension
DATA = extension/hopper.control $(sort $(wildcard extension/hopper--*.sql))

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --load-extension=hopper
ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=hopper

# The JIT bitcode rule ignores PG_CXXFLAGS, and the extension gains nothing from it.
override with_llvm = no
HOPPER_WERROR ?= $(if $(CI),-Werror,)
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wno-unused-parameter $(HOPPER_WERROR) -fno-omit-frame-pointer
# Server headers as system headers: they are C and not warning-clean under C++ -Wextra.
PG_CPPFLAGS = -Iextension/include -isystem $(shell $(PG_CONFIG) --includedir-server 2>/dev/null)
SHLIB_LINK += -lstdc++

# On a fresh machine the build files are missing until the packages are there: install them first.
# Both are checked: Debian's postgresql-15 ships pgxs.mk without the server headers, which come
# with postgresql-server-dev-15.
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
PG_SERVER_H = $(shell $(PG_CONFIG) --includedir-server 2>/dev/null)/postgres.h
ifeq ($(wildcard $(PGXS)),)
HOPPER_NEED_DEPS = 1
endif
ifeq ($(wildcard $(PG_SERVER_H)),)
HOPPER_NEED_DEPS = 1
endif
ifdef HOPPER_NEED_DEPS
$(info hopper: PostgreSQL build files not found; running test/deps.sh)
DEPS_STATUS := $(shell test/deps.sh >&2; echo $$?)
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
endif
ifeq ($(wildcard $(PGXS)),)
$(error PostgreSQL 15 server development files are missing: see the apt-get line above)
endif
ifeq ($(wildcard $(PG_SERVER_H)),)
$(error PostgreSQL 15 server headers (postgres.h) are missing: see the apt-get line above)
endif
include $(PGXS)

CLIENT_BUILD = client/build
CMAKE_BUILD_TYPE ?= RelWithDebInfo
# The bench needs the client library, not its test suites: building those would spend a minute of
# the bench's 20 on a fresh checkout.
CLIENT_TESTS ?= ON

.PHONY: deps client stage-install test demo bench bench-peers format format-check clean-all

deps:
	@test/deps.sh

all: client

client: deps
	@if [ -f client/CMakeLists.txt ] && [ -z "$(SKIP_CLIENT)" ]; then \
	  cmake -S client -B $(CLIENT_BUILD) -DCMAKE_BUILD_TYPE=$(CMAKE_BUILD_TYPE) -DHOPPER_WERROR=$(if $(CI),ON,OFF) \
	    -DHOPPER_BUILD_TESTS=$(CLIENT_TESTS) >/dev/null && \
	  cmake --build $(CLIENT_BUILD) -j 2; \
	fi

install: install-client
.PHONY: install-client
install-client:
	@if [ -d $(CLIENT_BUILD) ] && [ -z "$(SKIP_CLIENT)" ]; then cmake --install $(CLIENT_BUILD); fi

# Installs the extension into the project's private copy of the server (see test/cluster.sh).
stage-install: all
	@test/cluster.sh stage
	@$(MAKE) --no-print-directory install SKIP_CLIENT=1 DESTDIR="$$(test/cluster.sh stagedir)" >/dev/null

test: deps
	@$(MAKE) --no-print-directory stage-install
	@test/run-tests.sh

demo: deps
	@$(MAKE) --no-print-directory stage-install
	@test/demo.sh

bench: deps
	@HOPPER_DEPS_BENCH=1 test/deps.sh
	@$(MAKE) --no-print-directory stage-install CLIENT_TESTS=OFF
	@bench/run.sh

bench-peers: deps
	@$(MAKE) --no-print-directory stage-install CLIENT_TESTS=OFF
	@bench/peers.sh

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.hpp' 2>/dev/null)
format:
	clang-format -i $(FORMAT_FILES)

# CI runs this: C++ sources follow .clang-format.
format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES)

clean-all: clean
	rm -rf $(CLIENT_BUILD) .hopper output_iso results regression.diffs regression.out

# PGXS tracks no header dependencies unless PostgreSQL was configured with --enable-depend.
$(OBJS): $(wildcard extension/include/hopper/*.hpp)
