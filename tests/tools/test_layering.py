"""scripts/check_layering.py: the real tree and build pass; a planted violation of each kind fails.

Planted trees carry the repository's own docs/architecture.md, whose tables the script reads."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SOURCE = Path(os.environ.get("CUBE3D_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("CUBE3D_BUILD_DIR", SOURCE / "build"))
SCRIPT = SOURCE / "scripts" / "check_layering.py"
ARCHITECTURE = SOURCE / "docs" / "architecture.md"


def check(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True)


def planted_violations(test, files, architecture=True):
    """The script's lines over a tree of just these files (and the real docs/architecture.md),
    which must fail it."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if architecture:
            (root / "docs").mkdir()
            shutil.copy(ARCHITECTURE, root / "docs" / "architecture.md")
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        proc = check("--root", root)
        test.assertEqual(proc.returncode, 1, proc.stdout)
        return proc.stdout.splitlines()


def assert_exactly(test, lines, expected):
    """Each expected line begins one of lines, and nothing else is there."""
    text = "\n".join(lines)
    for e in expected:
        test.assertTrue(any(line.startswith(e) for line in lines), f"{e}\n{text}")
    test.assertEqual(len(lines), len(expected), text)


class LayeringTest(unittest.TestCase):
    def test_repository_and_its_build_hold(self):
        proc = check("--root", SOURCE, "--build-dir", BUILD)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("0 violation(s)", proc.stderr)

    def test_torch_free_client_really_links_no_torch(self):
        client = BUILD / "bin" / "cube3d-client"
        if not client.exists():
            self.skipTest("built without the server")
        needed = subprocess.run(["readelf", "-d", client], capture_output=True, text=True,
                                check=True).stdout
        self.assertIn("libgrpc++", needed)  # the check reads real dependencies
        self.assertNotIn("libtorch", needed)
        self.assertNotIn("libc10", needed)

    def test_planted_include_violations_fail(self):
        files = {
            "src/mesh/bad.cpp": '#include <ATen/ATen.h>\n#include "cube3d/engine/engine.h"\n'
                                '#include "cube3d/tensor_io/safetensors.h"\n'
                                '#include "cube3d/core/error.h"\n',
            "src/scheduler/bad.cpp": '#include <grpcpp/grpcpp.h>\n'
                                     '#include "cube3d/v1/mesh_service.pb.h"\n',
            "src/model/bad.cpp": '#include <ATen/ATen.h>\n#include "cube3d/mesh/mesh.h"\n'
                                 '#include <cuda_runtime.h>\n',
            # The pipeline's one exception (model_text.cpp may include model/) is that file's.
            "src/pipeline/model_text.cpp": '#include "cube3d/model/clip_text_normalizer.h"\n',
            "src/pipeline/bad.cpp": '#include "cube3d/model/clip_text_normalizer.h"\n',
            # TBB stays inside src/mesh/: its own sources may, its public headers and the engine
            # may not.
            "src/mesh/parallel.h": '#include <tbb/parallel_for.h>\n',
            "include/cube3d/mesh/bad.h": '#include <tbb/task_arena.h>\n',
            "src/engine/bad.cpp": '#include <oneapi/tbb.h>\n',
            # The tools' headers are the tools layer's too: no server header.
            "include/cube3d/tools/bad.h": '#include "cube3d/server/service/result_key.h"\n',
            # A folder that no row names.
            "src/widgets/gadget.cpp": '#include "cube3d/core/error.h"\n',
        }
        lines = planted_violations(self, files)
        expected = [
            "include/cube3d/tools/bad.h:1: tools may not include "
            "cube3d/server/service/result_key.h (layer server)",
            "src/mesh/bad.cpp:1: mesh includes <ATen/ATen.h> (libtorch, which its row does not "
            "allow)",
            "src/mesh/bad.cpp:2: mesh may not include cube3d/engine/engine.h (layer engine)",
            "src/mesh/bad.cpp:3: mesh may not include cube3d/tensor_io/safetensors.h "
            "(layer tensor_io)",
            "src/scheduler/bad.cpp:1: scheduler includes <grpcpp/grpcpp.h> (gRPC, which",
            "src/scheduler/bad.cpp:2: scheduler includes cube3d/v1/mesh_service.pb.h "
            "(messages, which",
            "src/model/bad.cpp:2: model may not include cube3d/mesh/mesh.h (layer mesh)",
            "src/model/bad.cpp:3: model includes <cuda_runtime.h> (CUDA, which",
            "src/pipeline/bad.cpp:1: pipeline may not include "
            "cube3d/model/clip_text_normalizer.h (layer model)",
            "include/cube3d/mesh/bad.h:1: mesh includes <tbb/task_arena.h> (TBB only in "
            "src/mesh/",
            "src/engine/bad.cpp:1: engine includes <oneapi/tbb.h> (TBB, which its row",
            "src/engine/bad.cpp:1: engine includes <oneapi/tbb.h> (TBB only in src/mesh/",
            "src/widgets: a folder that no row of docs/architecture.md's layer table names",
        ]
        assert_exactly(self, lines, expected)

    def test_planted_triton_source_imports_fail(self):
        # kernels/*.py: triton, the standard library and each other; torch or numpy fail.
        files = {
            "kernels/good_kernels.py": "import math\nimport triton\nimport triton.language as tl\n"
                                       "from concurrent.futures import ProcessPoolExecutor\n",
            "kernels/good_build.py": "import good_kernels\n",
            "kernels/bad_kernels.py": "import triton\nimport torch\nfrom numpy import zeros\n",
        }
        lines = planted_violations(self, files)
        assert_exactly(self, lines, [
            "kernels/bad_kernels.py:2: a Triton kernel source imports torch (the kernels know "
            "nothing of libtorch)",
            "kernels/bad_kernels.py:3: a Triton kernel source imports numpy (only triton and the "
            "standard library)",
        ])

    def test_planted_server_part_violations_fail(self):
        files = {
            # A front door reaching past the service: the executor, the pipeline, the engine.
            "src/server/http/bad_route.cpp":
                '#include "cube3d/server/executor/engine_executor.h"\n'
                '#include "cube3d/pipeline/shape_pipeline.h"\n'
                '#include "cube3d/server/service/service.h"\n',
            # The HTTP door speaks the service's words: no gRPC, not even its Status or map.
            "src/server/http/bad_status.cpp":
                '#include <grpcpp/support/status.h>\n#include "cube3d/api/grpc_status.h"\n'
                '#include "cube3d/v1/mesh_service.pb.h"\n',
            # HTTP may draw a mesh (the preview's header, which draws the response's arrays
            # where they are) and no more of the mesh layer, not even Mesh; no other part may.
            "src/server/http/bad_png.cpp":
                '#include "cube3d/mesh/mesh_preview.h"\n#include "cube3d/mesh/mesh.h"\n'
                '#include "cube3d/mesh/mesh_io.h"\n',
            "src/server/grpc/bad_png.cpp": '#include "cube3d/mesh/mesh_preview.h"\n',
            # The mesh layer's options are the config's section (the config part's exception);
            # no other part names them, and the config part no more of the mesh layer.
            "src/server/executor/bad_mesh_options.cpp":
                '#include "cube3d/mesh/mesh_pipeline.h"\n',
            "src/server/config/bad_mesh.cpp":
                '#include "cube3d/mesh/hierarchical_occupancy.h"\n'
                '#include "cube3d/mesh/marching_cubes.h"\n',
            # The mesh layer's vocabulary (formats, the compact encoding, profile, pivot, a
            # request's digest fields) is the work's, the service's, the protocol's, the
            # config's and the executor's words; none of them reaches the layer's code, and no
            # other part (a door, the jobs) names it.
            "src/server/work/bad_mesh.cpp":
                '#include "cube3d/mesh/compact_mesh.h"\n#include "cube3d/mesh/shape_fields.h"\n'
                '#include "cube3d/mesh/marching_cubes.h"\n',
            "src/server/jobs/bad_vocabulary.cpp": '#include "cube3d/mesh/mesh_format.h"\n',
            "include/cube3d/server/grpc/bad_service.h":
                '#include "cube3d/engine/engine.h"\n#include "cube3d/server/httpd/router.h"\n',
            # The service with a transport library in it, gRPC's Status, or a door's header.
            "src/server/service/bad_service.cpp":
                '#include <boost/beast/http.hpp>\n#include <grpcpp/server.h>\n'
                '#include <grpcpp/support/status.h>\n'
                '#include "cube3d/server/httpd/http_server.h"\n',
            # The doors' codecs (wire/) read and write the API's messages: the service speaks
            # its own words (ClientRequest, MeshAnswer), includes neither the codecs nor any
            # message; the codecs reach no door nor the cache.
            "src/server/service/bad_codec.cpp":
                '#include "cube3d/server/wire/request_codec.h"\n'
                '#include "cube3d/v1/mesh_service.pb.h"\n#include <google/protobuf/message.h>\n',
            "src/server/wire/bad_wire.cpp":
                '#include "cube3d/server/http/http_gateway.h"\n'
                '#include "cube3d/server/cache/result_cache.h"\n',
            # app/ is main's own.
            "src/server/config/bad_config.cpp": '#include "cube3d/server/app/signal_watcher.h"\n',
            # Server code outside a part folder, and a part the table lacks.
            "src/server/loose.cpp": '#include "cube3d/core/error.h"\n',
            "src/server/widgets/gadget.cpp": '#include "cube3d/core/error.h"\n',
            # The cache's store knows no request, no service; jobs reach no front door.
            "src/server/cache/bad_cache.cpp":
                '#include "cube3d/server/service/service.h"\n',
            "src/server/jobs/bad_jobs.cpp":
                '#include "cube3d/server/http/job_routes.h"\n#include <grpcpp/server.h>\n',
            # Admission (in the gRPC-free server base) with gRPC's Status or an API message.
            "include/cube3d/server/admission/bad_keys.h":
                '#include <grpcpp/support/status.h>\n#include "cube3d/v1/mesh_service.pb.h"\n',
            # The Open Inference Protocol's messages are gRPC's: not the HTTP door's, nor the
            # model side's (which both doors share); and the model side reaches no door.
            "src/server/http/bad_v2.cpp": '#include "inference/grpc_service.pb.h"\n',
            "src/server/inference/bad_plan.cpp":
                '#include "inference/model_config.pb.h"\n'
                '#include "cube3d/server/http/inference_routes.h"\n',
            # A client that includes the server.
            "src/clients/bad_client.cpp":
                '#include "cube3d/server/service/service.h"\n'
                '#include "cube3d/api/grpc_status.h"\n#include "cube3d/engine/engine.h"\n',
        }
        lines = planted_violations(self, files)
        expected = [
            "src/server/http/bad_route.cpp:1: server/http may not include "
            "cube3d/server/executor/engine_executor.h (server/executor)",
            "src/server/http/bad_route.cpp:2: server/http may not include "
            "cube3d/pipeline/shape_pipeline.h (layer pipeline)",
            "src/server/http/bad_status.cpp:1: server/http includes grpcpp/support/status.h "
            "(gRPC, which its row does not allow)",
            "src/server/http/bad_status.cpp:2: server/http may not include "
            "cube3d/api/grpc_status.h (layer api)",
            "src/server/http/bad_png.cpp:2: server/http may not include "
            "cube3d/mesh/mesh.h (layer mesh)",
            "src/server/http/bad_png.cpp:2: server may not include cube3d/mesh/mesh.h "
            "(layer mesh)",
            "src/server/http/bad_png.cpp:3: server/http may not include "
            "cube3d/mesh/mesh_io.h (layer mesh)",
            "src/server/http/bad_png.cpp:3: server may not include cube3d/mesh/mesh_io.h "
            "(layer mesh)",
            "src/server/grpc/bad_png.cpp:1: server/grpc may not include "
            "cube3d/mesh/mesh_preview.h (layer mesh)",
            "src/server/executor/bad_mesh_options.cpp:1: server/executor may not include "
            "cube3d/mesh/mesh_pipeline.h (layer mesh)",
            "src/server/config/bad_mesh.cpp:2: server/config may not include "
            "cube3d/mesh/marching_cubes.h (layer mesh)",
            "src/server/config/bad_mesh.cpp:2: server may not include "
            "cube3d/mesh/marching_cubes.h (layer mesh)",
            "src/server/work/bad_mesh.cpp:3: server/work may not include "
            "cube3d/mesh/marching_cubes.h (layer mesh)",
            "src/server/work/bad_mesh.cpp:3: server may not include "
            "cube3d/mesh/marching_cubes.h (layer mesh)",
            "src/server/jobs/bad_vocabulary.cpp:1: server/jobs may not include "
            "cube3d/mesh/mesh_format.h (layer mesh)",
            "include/cube3d/server/grpc/bad_service.h:1: server/grpc may not include "
            "cube3d/engine/engine.h (layer engine)",
            "include/cube3d/server/grpc/bad_service.h:1: server may not include "
            "cube3d/engine/engine.h (layer engine)",
            "include/cube3d/server/grpc/bad_service.h:2: server/grpc may not include "
            "cube3d/server/httpd/router.h (server/httpd)",
            "src/server/service/bad_service.cpp:1: server/service includes "
            "boost/beast/http.hpp (Beast, which",
            "src/server/service/bad_service.cpp:2: server/service includes grpcpp/server.h "
            "(gRPC, which",
            "src/server/service/bad_service.cpp:3: server/service includes "
            "grpcpp/support/status.h (gRPC, which",
            "src/server/service/bad_service.cpp:4: server/service may not include "
            "cube3d/server/httpd/http_server.h (server/httpd)",
            "src/server/service/bad_codec.cpp:1: server/service may not include "
            "cube3d/server/wire/request_codec.h (server/wire)",
            "src/server/service/bad_codec.cpp:2: server/service includes "
            "cube3d/v1/mesh_service.pb.h (messages, which",
            "src/server/service/bad_codec.cpp:3: server/service includes "
            "google/protobuf/message.h (messages, which",
            "src/server/wire/bad_wire.cpp:1: server/wire may not include "
            "cube3d/server/http/http_gateway.h (server/http)",
            "src/server/wire/bad_wire.cpp:2: server/wire may not include "
            "cube3d/server/cache/result_cache.h (server/cache)",
            "src/server/config/bad_config.cpp:1: server/config may not include "
            "cube3d/server/app/signal_watcher.h (server/app)",
            "src/server/loose.cpp: server code outside a part folder",
            "src/server/widgets/gadget.cpp: unknown server part 'widgets'",
            "src/server/cache/bad_cache.cpp:1: server/cache may not include "
            "cube3d/server/service/service.h (server/service)",
            "src/server/jobs/bad_jobs.cpp:1: server/jobs may not include "
            "cube3d/server/http/job_routes.h (server/http)",
            "src/server/jobs/bad_jobs.cpp:2: server/jobs includes grpcpp/server.h (gRPC, which",
            "include/cube3d/server/admission/bad_keys.h:1: server/admission includes "
            "grpcpp/support/status.h (gRPC, which",
            "include/cube3d/server/admission/bad_keys.h:2: server/admission includes "
            "cube3d/v1/mesh_service.pb.h (messages, which",
            "src/server/http/bad_v2.cpp:1: server/http includes inference/grpc_service.pb.h "
            "(gRPC, which",
            "src/server/inference/bad_plan.cpp:1: server/inference includes "
            "inference/model_config.pb.h (gRPC, which",
            "src/server/inference/bad_plan.cpp:2: server/inference may not include "
            "cube3d/server/http/inference_routes.h (server/http)",
            "src/clients/bad_client.cpp:1: clients may not include "
            "cube3d/server/service/service.h (layer server)",
            "src/clients/bad_client.cpp:1: clients may not include "
            "cube3d/server/service/service.h (a server header)",
            "src/clients/bad_client.cpp:3: clients may not include cube3d/engine/engine.h "
            "(layer engine)",
        ]
        assert_exactly(self, lines, expected)

    def test_planted_library_mismatches_fail(self):
        # CMakeLists.txt and the tables must say the same: one folder, one library.
        files = {
            "CMakeLists.txt":
                "cube3d_layer_library(cube3d_core core)\n"
                "file(GLOB mesh_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/mesh/*.cpp)\n"
                "add_library(cube3d_mesh STATIC ${mesh_sources} src/core/extra.cpp)\n"
                "cube3d_server_library(cube3d_jobs service)\n"
                "cube3d_layer_library(cube3d_widgets widgets)\n",
        }
        lines = planted_violations(self, files)
        for e in ["CMakeLists.txt: cube3d_mesh is built from src/core, src/mesh, not src/mesh/ "
                  "alone",
                  "CMakeLists.txt: cube3d_jobs is built from src/server/service, not "
                  "src/server/jobs/ alone",
                  "CMakeLists.txt: cube3d_widgets (from src/widgets) is no row of "
                  "docs/architecture.md's tables",
                  "CMakeLists.txt: no library cube3d_scheduler (the tables' library of "
                  "src/scheduler/)"]:
            self.assertIn(e, lines)
        self.assertNotIn("CMakeLists.txt: no library cube3d_core (the tables' library of "
                         "src/core/)", lines)

    def test_planted_relative_includes_fail(self):
        # An include names the public path (cube3d/<layer>/..., a kernel header its bare name):
        # "../x.h" or "./x.h" would slip past the layer checks, which read public paths.
        files = {
            "src/core/a.cpp": '#include "../core/error.h"\n#include "cube3d/core/error.h"\n'
                              '#include <../x.h>\n',
            "include/cube3d/mesh/m.h": '#include "./mesh.h"\n',
            "bench/b.cpp": '#include "../include/cube3d/core/error.h"\n',
            "kernels/k.cu": '#include "decode.cuh"\n#include "./decode.cuh"\n',
            "src/tools/t.cpp": '#include "cube3d/tools/../core/error.h"\n',
        }
        lines = planted_violations(self, files)
        assert_exactly(self, lines, [
            'src/core/a.cpp:1: includes "../core/error.h", a relative path (name the public '
            "path, cube3d/<layer>/...",
            "src/core/a.cpp:3: includes <../x.h>, a relative path",
            'include/cube3d/mesh/m.h:1: includes "./mesh.h", a relative path',
            'bench/b.cpp:1: includes "../include/cube3d/core/error.h", a relative path',
            'kernels/k.cu:2: includes "./decode.cuh", a relative path',
            'src/tools/t.cpp:1: includes "cube3d/tools/../core/error.h", a relative path',
        ])

    def test_planted_testing_header_outside_tests_fails(self):
        # A *_testing.h header (test-only hooks) is included by tests and its defining source.
        files = {
            "src/server/jobs/redis_job_store.cpp":
                '#include "cube3d/server/jobs/redis_job_store_testing.h"\n',
            "src/server/app/server_main.cpp":
                '#include "cube3d/server/jobs/redis_job_store_testing.h"\n',
            "include/cube3d/server/jobs/job_service.h":
                '#include "cube3d/server/jobs/redis_job_store_testing.h"\n',
        }
        lines = [line for line in planted_violations(self, files) if "_testing.h" in line]
        assert_exactly(self, lines, [
            "src/server/app/server_main.cpp:1: includes cube3d/server/jobs/"
            "redis_job_store_testing.h, a test-only header (tests/ and "
            "src/server/jobs/redis_job_store.cpp alone may)",
            "include/cube3d/server/jobs/job_service.h:1: includes cube3d/server/jobs/"
            "redis_job_store_testing.h, a test-only header",
        ])

    def test_planted_misnamed_sources_fail(self):
        # Sources are .cpp and headers .h: a .cc escapes CMake's *.cpp globs and these checks.
        files = {
            "src/core/ok.cpp": "\n",
            "include/cube3d/core/ok.h": "#pragma once\n",
            "src/core/a.cc": "\n",
            "src/mesh/b.cxx": "\n",
            "include/cube3d/core/c.hpp": "#pragma once\n",
            "src/server/http/d.hh": "#pragma once\n",
        }
        lines = planted_violations(self, files)
        assert_exactly(self, lines, [
            "src/core/a.cc: a .cc file (the sources are .cpp, the headers .h; CMake's *.cpp "
            "globs and these checks miss it): rename it to .cpp",
            "src/mesh/b.cxx: a .cxx file (the sources are .cpp, the headers .h; CMake's *.cpp "
            "globs and these checks miss it): rename it to .cpp",
            "include/cube3d/core/c.hpp: a .hpp file (the sources are .cpp, the headers .h; "
            "CMake's *.cpp globs and these checks miss it): rename it to .h",
            "src/server/http/d.hh: a .hh file",
        ])

    def test_planted_link_edges_fail(self):
        # target_link_libraries() of a table's library: only the cube3d_* libraries its row may
        # include (a part: its row's parts and layers); an INTERFACE library counts as what it
        # links; executables and other libraries are not the tables'.
        files = {
            "CMakeLists.txt":
                "target_link_libraries(cube3d_engine PUBLIC cube3d_model PRIVATE cube3d_kernels)\n"
                "target_link_libraries(cube3d_mesh PUBLIC cube3d_core\n"
                "  PRIVATE cube3d_engine)\n"
                "# target_link_libraries(cube3d_core PUBLIC cube3d_mesh)\n"
                "target_link_libraries(cube3d_scheduler PUBLIC cube3d_api_messages)\n"
                "target_link_libraries(cube3d_pipeline PUBLIC cube3d_engine cube3d_mesh\n"
                "  $<$<BOOL:${WITH_API}>:cube3d_api>)\n"
                "add_library(cube3d_server_lib INTERFACE)\n"
                "target_link_libraries(cube3d_server_lib INTERFACE cube3d_service)\n"
                "target_link_libraries(cube3d_tools PUBLIC cube3d_pipeline cube3d_server_lib)\n"
                "target_link_libraries(cube3d_result_cache PUBLIC cube3d_redis cube3d_service)\n"
                # HTTP's mesh preview is its row's exception, for links as for includes.
                "target_link_libraries(cube3d_http_door PUBLIC cube3d_service cube3d_httpd\n"
                "  cube3d_mesh cube3d_pipeline)\n"
                "target_link_libraries(cube3d_grpc_door PUBLIC cube3d_api cube3d_gizmo "
                "spdlog::spdlog)\n"
                # model_text.cpp's exception is the pipeline library's too.
                "target_link_libraries(cube3d_pipeline PRIVATE cube3d_model)\n"
                "target_link_libraries(cube3d_service PUBLIC cube3d_api_messages)\n"
                "target_link_libraries(cube3d_api PUBLIC cube3d_api_messages cube3d_core)\n"
                "target_link_libraries(cube3d-server PRIVATE cube3d_server_lib cube3d_engine)\n",
        }
        lines = [line for line in planted_violations(self, files)
                 if not line.startswith("CMakeLists.txt: no library ")]
        assert_exactly(self, lines, [
            "CMakeLists.txt:3: mesh (cube3d_mesh) may not link cube3d_engine (layer engine; link "
            "only what its row of docs/architecture.md may include)",
            "CMakeLists.txt:5: scheduler (cube3d_scheduler) links cube3d_api_messages (messages, "
            "which its row does not allow)",
            "CMakeLists.txt:7: pipeline (cube3d_pipeline) may not link cube3d_api (layer api;",
            "CMakeLists.txt:10: tools (cube3d_tools) may not link through cube3d_server_lib, "
            "cube3d_service (server/service;",
            "CMakeLists.txt:11: server/cache (cube3d_result_cache) may not link cube3d_service "
            "(server/service;",
            "CMakeLists.txt:13: server/http (cube3d_http_door) may not link cube3d_pipeline "
            "(layer pipeline;",
            "CMakeLists.txt:14: server/grpc (cube3d_grpc_door) links cube3d_gizmo, no library of "
            "docs/architecture.md's tables",
            # The service speaks its own words: the API's messages are the doors' codecs'.
            "CMakeLists.txt:16: server/service (cube3d_service) links cube3d_api_messages "
            "(messages, which",
        ])

    def test_planted_hiredis_outside_redis_fails(self):
        # hiredis is the redis part's: included by src/server/redis/*.cpp alone, linked by
        # cube3d_redis alone and PRIVATE.
        files = {
            "src/server/redis/redis_connection.cpp": "#include <hiredis/hiredis.h>\n",
            "src/server/redis/redis_reply.h": "#include <hiredis/read.h>\n",
            "include/cube3d/server/redis/redis_connection.h": "#include <hiredis/hiredis.h>\n",
            "src/server/cache/redis_tier.cpp": '#include "hiredis/hiredis.h"\n',
            "tests/server/redis/fake_redis.cpp": "#include <hiredis/hiredis.h>\n",
            "CMakeLists.txt":
                "pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)\n"
                "target_link_libraries(cube3d_redis PUBLIC cube3d_core PkgConfig::HIREDIS)\n"
                "target_link_libraries(cube3d_result_cache PUBLIC cube3d_redis\n"
                "  PRIVATE PkgConfig::HIREDIS)\n"
                "target_link_libraries(cube3d_redis PRIVATE hiredis_ssl OpenSSL::SSL)\n"
                "link_libraries(${HIREDIS_LIBRARIES})\n"
                "target_link_libraries(cube3d_redis hiredis)\n",
            "tests/CMakeLists.txt":
                "cube3d_layer_tests(server cube3d_server_base PkgConfig::HIREDIS TORCH_FREE)\n"
                "target_link_libraries(cube3d_redis_tests PRIVATE ${HIREDIS_LINK_LIBRARIES})\n",
        }
        lines = [line for line in planted_violations(self, files)
                 if not line.startswith("CMakeLists.txt: no library ")]
        assert_exactly(self, lines, [
            "src/server/redis/redis_reply.h:1: includes <hiredis/read.h> (hiredis is private to "
            "src/server/redis/*.cpp: no header, no other folder",
            "include/cube3d/server/redis/redis_connection.h:1: includes <hiredis/hiredis.h>",
            "src/server/cache/redis_tier.cpp:1: includes <hiredis/hiredis.h>",
            "tests/server/redis/fake_redis.cpp:1: includes <hiredis/hiredis.h>",
            "CMakeLists.txt:2: cube3d_redis links PkgConfig::HIREDIS PUBLIC (hiredis is private "
            "to it: link it PRIVATE)",
            "CMakeLists.txt:4: cube3d_result_cache links PkgConfig::HIREDIS (hiredis is private "
            "to cube3d_redis: link it there alone, PRIVATE)",
            "CMakeLists.txt:6: link_libraries(${HIREDIS_LIBRARIES}) links hiredis into every "
            "target",
            "CMakeLists.txt:7: cube3d_redis links hiredis with no keyword",
            "tests/CMakeLists.txt:1: cube3d_layer_tests() is handed PkgConfig::HIREDIS (hiredis "
            "is private to cube3d_redis",
            "tests/CMakeLists.txt:2: cube3d_redis_tests links ${HIREDIS_LINK_LIBRARIES}",
        ])

    def test_real_cmake_link_edges_hold_and_are_read(self):
        # The tree's own CMakeLists.txt passes the link checks, and they read it: a forbidden
        # edge and a hiredis link appended to it are found at their lines, and nothing else.
        text = (SOURCE / "CMakeLists.txt").read_text().rstrip("\n") + "\n"
        text += ("target_link_libraries(cube3d_core PUBLIC cube3d_engine)\n"
                 "target_link_libraries(cube3d_jobs PRIVATE PkgConfig::HIREDIS)\n")
        n = len(text.splitlines())
        lines = planted_violations(self, {"CMakeLists.txt": text})
        assert_exactly(self, lines, [
            f"CMakeLists.txt:{n - 1}: core (cube3d_core) may not link cube3d_engine (layer "
            "engine;",
            f"CMakeLists.txt:{n}: cube3d_jobs links PkgConfig::HIREDIS (hiredis is private to "
            "cube3d_redis",
        ])

    def test_the_tables_are_required_and_checked(self):
        lines = planted_violations(self, {"src/core/a.cpp": "\n"}, architecture=False)
        self.assertEqual(lines, ["docs/architecture.md: missing (it holds the layer tables this "
                                 "check reads)"])
        text = ARCHITECTURE.read_text()
        row = next(line for line in text.splitlines() if line.startswith("| mesh |"))
        broken = text.replace(row, row.replace("| core |", "| core, gizmo |"))
        broken = broken.replace("| Beast |", "| Beast, Qt |", 1)
        lines = planted_violations(self, {"docs/architecture.md": broken}, architecture=False)
        self.assertIn("docs/architecture.md: layer mesh may include an unknown layer 'gizmo'",
                      lines)
        self.assertTrue(any("may use an unknown library 'Qt'" in line for line in lines), lines)
        no_marker = text.replace("<!-- check_layering: server parts -->", "")
        lines = planted_violations(self, {"docs/architecture.md": no_marker}, architecture=False)
        self.assertEqual(lines, ["docs/architecture.md: no table marked <!-- check_layering: "
                                 "server parts -->"])

    def test_planted_batch_name_clashes_fail(self):
        # Sources that one unity batch may join: their anonymous namespaces become one.
        files = {
            "src/core/a.cpp": "namespace cube3d {\nnamespace {\n\n"
                              "std::string trim(std::string_view s) { return {}; }\n"
                              "constexpr int kLimit = 3;\nstruct Entry {\n  int x;\n};\n"
                              "using Clock = std::chrono::steady_clock;\n"
                              "namespace http = boost::beast::http;\n"
                              "template <typename T>\nT pick(T a) { return a; }\n"
                              "int twice(int x) { return 2 * x; }\n"
                              "int twice(long x) { return 2 * x; }\n\n"
                              "}  // namespace\n\nint visible() { return 1; }\n"
                              "}  // namespace cube3d\n",
            "src/server/http/b.cpp": "namespace cube3d {\nnamespace {\n\n"
                                     "std::string_view trim(std::string_view s) {\n"
                                     "  return s;\n}\n"
                                     "constexpr const char* kLimit = \"x\";\n"
                                     "class Entry;\n"
                                     "using Clock = std::chrono::steady_clock;\n"
                                     "namespace http = boost::beast::http;\n"
                                     "\n}  // namespace\n\n"
                                     "int visible2() { return 2; }\n"
                                     "}  // namespace cube3d\n",
            "bench/c.cpp": "static double pick(double a) { return a; }\n"
                           "namespace {\nusing Clock = std::chrono::system_clock;\n"
                           "}  // namespace\n",
            # Two executables' mains never share a target.
            "src/tools/one_main.cpp": "namespace {\nint run() { return 0; }\n}  // namespace\n"
                                      "int main() { return run(); }\n",
            "src/clients/two_main.cpp": "namespace {\nint run() { return 1; }\n"
                                        "}  // namespace\nint main() { return run(); }\n",
        }
        lines = planted_violations(self, files)
        expected = [
            "src/server/http/b.cpp:4: file-local 'trim' is also src/core/a.cpp:4's",
            "src/server/http/b.cpp:7: file-local 'kLimit' is also src/core/a.cpp:5's",
            "src/server/http/b.cpp:8: file-local 'Entry' is also src/core/a.cpp:6's",
            "bench/c.cpp:1: file-local 'pick' is also src/core/a.cpp:12's",
            # A different alias of the same name clashes; the same alias twice does not.
            "bench/c.cpp:3: file-local 'Clock' is also src/core/a.cpp:9's",
        ]
        assert_exactly(self, lines, expected)

    def test_planted_second_tls_policy_and_grpc_log_routing_fail(self):
        # The TLS policy and gRPC's log routing are written once; the files that hold them may.
        files = {
            "src/server/httpd/tls_policy.cpp": "void a(SSL_CTX* c) {\n"
                                               "  SSL_CTX_set_cipher_list(c, kList);\n}\n",
            "include/cube3d/server/httpd/tls_policy.h": "// GRPC_SSL_CIPHER_SUITES\n",
            "src/server/grpc/grpc_log.cpp": "void r() { gpr_set_log_function(f); }\n",
            "src/server/httpd/http_server.cpp": "void b(SSL_CTX* c) {\n"
                                                "  SSL_CTX_set_cipher_list(c, \"ALL\");\n"
                                                "  SSL_CTX_set1_groups_list(c, \"P-256\");\n}\n",
            "src/server/app/server_main.cpp": "void m() {\n"
                                              "  setenv(\"GRPC_SSL_CIPHER_SUITES\", x, 1);\n"
                                              "  gpr_set_log_function(mine);\n}\n",
        }
        lines = [line for line in planted_violations(self, files)
                 if "a folder that no row" not in line]
        expected = [
            "src/server/httpd/http_server.cpp:2: sets TLS policy (SSL_CTX_set_cipher_list) outside",
            "src/server/httpd/http_server.cpp:3: sets TLS policy (SSL_CTX_set1_groups_list) "
            "outside",
            "src/server/app/server_main.cpp:2: sets TLS policy (GRPC_SSL_CIPHER_SUITES) outside",
            "src/server/app/server_main.cpp:3: routes gRPC's log lines (gpr_set_log_function) "
            "outside src/server/grpc/grpc_log.cpp",
        ]
        assert_exactly(self, lines, expected)

    def test_planted_link_violations_fail(self):
        generate = BUILD / "bin" / "cube3d-generate"
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "src"
            (root / "docs").mkdir(parents=True)
            shutil.copy(ARCHITECTURE, root / "docs" / "architecture.md")
            bin_dir = Path(tmp) / "build" / "bin"
            bin_dir.mkdir(parents=True)
            # A torch binary where a torch-free one belongs...
            shutil.copy(generate, bin_dir / "cube3d-client")
            # ...and a shipped binary that carries the (fake) source tree's path.
            (bin_dir / "cube3d-tokenize").write_bytes(
                b"\0" + str(root.resolve()).encode() + b"/.cache/clip/vocab.txt.gz\0")
            proc = check("--root", root, "--build-dir", bin_dir.parent)
            self.assertEqual(proc.returncode, 1, proc.stdout)
            self.assertIn("cube3d-client: needs no tensors but links libtorch", proc.stdout)
            self.assertIn("cube3d-tokenize: carries the source path", proc.stdout)
            # A header path recorded by the compiler (libtorch's __FILE__) is not a default.
            (bin_dir / "cube3d-tokenize").write_bytes(
                str(root.resolve()).encode() + b"/build/torch_include/ATen/Context.h\0")
            (bin_dir / "cube3d-client").unlink()
            proc = check("--root", root, "--build-dir", bin_dir.parent)
            self.assertEqual(proc.returncode, 0, proc.stdout)
            # A CPU-only build (the CPU image's) whose server still links the CUDA backend.
            if "libtorch_cuda.so" in subprocess.run(["readelf", "-d", str(generate)],
                                                    capture_output=True, text=True).stdout:
                shutil.copy(generate, bin_dir / "cube3d-server")
                (bin_dir.parent / "CMakeCache.txt").write_text("CUBE3D_TORCH_CUDA:BOOL=OFF\n")
                proc = check("--root", root, "--build-dir", bin_dir.parent)
                self.assertEqual(proc.returncode, 1, proc.stdout)
                self.assertIn("cube3d-server: a CPU-only build (CUBE3D_TORCH_CUDA=OFF) but links "
                              "libtorch_cuda.so", proc.stdout)
                (bin_dir.parent / "CMakeCache.txt").write_text("CUBE3D_TORCH_CUDA:BOOL=ON\n")
                proc = check("--root", root, "--build-dir", bin_dir.parent)
                self.assertEqual(proc.returncode, 0, proc.stdout)


if __name__ == "__main__":
    unittest.main()
