#include "triton_launcher.h"

#include <cstring>
#include <stdexcept>

#ifdef CUBE3D_WITH_TRITON
#include <cuda.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>
#endif

namespace cube3d::kernels {

const CompiledKernel* find_compiled(const KernelLaunch& launch, int capability) {
  // sm_90a code runs on 9.0 alone; sm_80 code on every 8.x (binary compatible within a major).
  const int wanted = capability == 90 ? 90 : capability / 10 == 8 ? 80 : -1;
  for (const CompiledKernel& k : compiled_kernels()) {
    if (k.capability == wanted && launch.kernel == k.kernel && launch.variant == k.variant) {
      return &k;
    }
  }
  return nullptr;
}

std::string signature_mismatch(const KernelLaunch& launch, const CompiledKernel& kernel) {
  const auto type_name = [](ArgType t) {
    switch (t) {
      case ArgType::kPointer:
        return "pointer";
      case ArgType::kI32:
        return "i32";
      case ArgType::kI64:
        return "i64";
      case ArgType::kF32:
        return "fp32";
    }
    return "?";
  };
  if (launch.args.size() != kernel.param_count) {
    return std::to_string(launch.args.size()) + " arguments for " +
           std::to_string(kernel.param_count) + " parameters";
  }
  for (size_t i = 0; i < kernel.param_count; ++i) {
    const KernelArg& a = launch.args[i];
    const KernelParam& p = kernel.params[i];
    if (a.name != p.name || a.type != p.type) {
      return "argument " + std::to_string(i) + " is " + a.name + " (" + type_name(a.type) +
             "), the kernel's parameter " + p.name + " (" + type_name(p.type) + ")";
    }
  }
  return "";
}

#ifdef CUBE3D_WITH_TRITON

bool triton_cubins_compiled() { return !compiled_kernels().empty(); }

namespace {

// The driver functions the launcher uses, from the runtime's entry points (ABI of CUDA 12.0).
struct Driver {
  decltype(&::cuModuleLoadData) module_load_data = nullptr;
  decltype(&::cuModuleGetFunction) module_get_function = nullptr;
  decltype(&::cuFuncSetAttribute) func_set_attribute = nullptr;
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  std::string error;  // why an entry point is missing

  static const Driver& get() {
    static const Driver driver = load();
    return driver;
  }

  std::string describe(CUresult result) const {
    const char* text = nullptr;
    if (get_error_string == nullptr || get_error_string(result, &text) != CUDA_SUCCESS ||
        text == nullptr) {
      return "CUDA driver error " + std::to_string(static_cast<int>(result));
    }
    return text;
  }

 private:
  static Driver load() {
    Driver d;
    const auto entry = [&d](const char* symbol, auto& fn) {
      void* address = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found) !=
              cudaSuccess ||
          found != cudaDriverEntryPointSuccess || address == nullptr) {
        if (d.error.empty()) d.error = std::string("the CUDA driver has no ") + symbol;
        return;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(address);
    };
    entry("cuModuleLoadData", d.module_load_data);
    entry("cuModuleGetFunction", d.module_get_function);
    entry("cuFuncSetAttribute", d.func_set_attribute);
    entry("cuLaunchKernel", d.launch_kernel);
    entry("cuGetErrorString", d.get_error_string);
    return d;
  }
};

// Every variant's function once per device, for the process's life (a few kilobytes each).
CUfunction load_function(const CompiledKernel& kernel, int device, const std::string& label) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const CompiledKernel*>, CUfunction> loaded;
  const std::lock_guard lock(mutex);
  const auto key = std::make_tuple(device, &kernel);
  if (const auto it = loaded.find(key); it != loaded.end()) return it->second;
  const Driver& driver = Driver::get();
  const auto fail = [&](const std::string& what, CUresult r) {
    throw std::runtime_error(label + ": " + what + " " + kernel.kernel + " [" + kernel.variant +
                             "]: " + driver.describe(r));
  };
  CUmodule module = nullptr;
  if (const CUresult r = driver.module_load_data(&module, kernel.cubin_begin); r != CUDA_SUCCESS) {
    fail("loading", r);
  }
  CUfunction function = nullptr;
  if (const CUresult r = driver.module_get_function(&function, module, kernel.kernel);
      r != CUDA_SUCCESS) {
    fail("finding", r);
  }
  // Above 48 KiB a program's dynamic shared memory must be asked for.
  if (kernel.shared_bytes > 48 * 1024) {
    if (const CUresult r = driver.func_set_attribute(
            function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.shared_bytes);
        r != CUDA_SUCCESS) {
      fail("raising the shared memory of", r);
    }
  }
  loaded[key] = function;
  return function;
}

class CubinLaunches final : public LaunchSequence {
 public:
  explicit CubinLaunches(std::span<const KernelLaunch> launches)
      : per_run_(count_launches(launches)) {
    const Driver& driver = Driver::get();
    if (!driver.error.empty()) throw std::runtime_error("Triton decode kernels: " + driver.error);
    int device = 0;
    cudaError_t status = cudaGetDevice(&device);
    if (status == cudaSuccess) status = cudaFree(nullptr);  // the device's context, current
    int major = 0, minor = 0;
    if (status == cudaSuccess) {
      status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    }
    if (status == cudaSuccess) {
      status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    }
    if (status != cudaSuccess) {
      throw std::runtime_error(std::string("Triton decode kernels: no CUDA device: ") +
                               cudaGetErrorString(status));
    }
    const int capability = 10 * major + minor;
    for (const KernelLaunch& launch : launches) {
      const CompiledKernel* kernel = find_compiled(launch, capability);
      if (kernel == nullptr) {
        throw std::runtime_error(launch.label + ": no cubin of " + launch.kernel + " [" +
                                 launch.variant + "] for compute capability " +
                                 std::to_string(major) + "." + std::to_string(minor) +
                                 " (kernels/build_cubins.py compiles sm_90a and sm_80)");
      }
      if (const std::string why = signature_mismatch(launch, *kernel); !why.empty()) {
        throw std::runtime_error(launch.label + ": " + launch.kernel + " [" + launch.variant +
                                 "]: " + why);
      }
      Bound b;
      b.function = load_function(*kernel, device, launch.label);
      b.grid = launch.grid;
      b.threads = static_cast<unsigned>(kernel->num_warps * 32);
      b.shared = static_cast<unsigned>(kernel->shared_bytes);
      b.label = launch.label;
      // One 8-byte slot per argument (the kernel reads its own width from the slot's start),
      // then the global and profile scratch pointers Triton 3.6 appends, both null.
      b.storage.assign(launch.args.size() + 2, 0);
      for (size_t i = 0; i < launch.args.size(); ++i) {
        const KernelArg& a = launch.args[i];
        void* slot = &b.storage[i];
        switch (a.type) {
          case ArgType::kPointer:
            std::memcpy(slot, &a.pointer, sizeof(a.pointer));
            break;
          case ArgType::kI32: {
            const auto v = static_cast<int32_t>(a.integer);
            std::memcpy(slot, &v, sizeof(v));
            break;
          }
          case ArgType::kI64:
            std::memcpy(slot, &a.integer, sizeof(a.integer));
            break;
          case ArgType::kF32:
            std::memcpy(slot, &a.real, sizeof(a.real));
            break;
        }
      }
      for (uint64_t& slot : b.storage) b.params.push_back(&slot);
      bound_.push_back(std::move(b));
    }
  }

  void run(void* stream) override {
    const Driver& driver = Driver::get();
    for (Bound& b : bound_) {
      const CUresult r =
          driver.launch_kernel(b.function, b.grid[0], b.grid[1], b.grid[2], b.threads, 1, 1,
                               b.shared, static_cast<CUstream>(stream), b.params.data(), nullptr);
      if (r != CUDA_SUCCESS) {
        throw std::runtime_error(b.label + ": cuLaunchKernel: " + driver.describe(r));
      }
    }
  }

  const LaunchCount& per_run() const override { return per_run_; }

 private:
  struct Bound {
    CUfunction function = nullptr;
    std::array<uint32_t, 3> grid{};
    unsigned threads = 0;
    unsigned shared = 0;
    std::string label;
    std::vector<uint64_t> storage;
    std::vector<void*> params;  // into storage, which never moves once filled
  };
  std::vector<Bound> bound_;
  LaunchCount per_run_;
};

}  // namespace

std::unique_ptr<LaunchSequence> load_launches(std::span<const KernelLaunch> launches) {
  return std::make_unique<CubinLaunches>(launches);
}

#else  // no cubins in this build

std::span<const CompiledKernel> compiled_kernels() { return {}; }

bool triton_cubins_compiled() { return false; }

std::unique_ptr<LaunchSequence> load_launches(std::span<const KernelLaunch>) {
  throw std::runtime_error(
      "Triton decode kernels: this build has no cubins (they are compiled in the CUDA build, "
      "with triton in its Python)");
}

#endif

}  // namespace cube3d::kernels
