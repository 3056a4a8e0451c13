// Fake CUDA device for a CPU-only torch build: lets FakeTensor(device="cuda") run autograd.
//
// Autograd's engine and InputBuffer ask the device guard and the CUDA hooks whether CUDA exists; a CPU
// build answers "no" and fails ("Cannot access accelerator device when none is available"). Registering
// c10's FakeGuardImpl for the CUDA device type plus a hooks object that only *reports* CUDA is enough:
// no CUDA memory, stream or kernel is ever created, because every tensor on that device is a FakeTensor.
// Built by tessera.memory.fakecuda with g++ against torch's headers and dlopen'ed with RTLD_GLOBAL.

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

namespace at {

// The registry key must be "CUDAHooks": at::detail::getCUDAHooks() creates exactly that name.
struct CUDAHooks : public CUDAHooksInterface {
  explicit CUDAHooks(CUDAHooksArgs) {}
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  DeviceIndex deviceCount() const override { return c10::impl::kFakeGuardImplMaxDevices; }
  int getNumGPUs() const override { return c10::impl::kFakeGuardImplMaxDevices; }
  DeviceIndex current_device() const override { return 0; }
  DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(DeviceIndex) const override {}
  DeviceIndex exchangeDevice(DeviceIndex) const override { return 0; }
  DeviceIndex maybeExchangeDevice(DeviceIndex) const override { return 0; }
  void deviceSynchronize(DeviceIndex) const override {}
};

REGISTER_CUDA_HOOKS(CUDAHooks);

}  // namespace at

C10_REGISTER_GUARD_IMPL(CUDA, c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>);

// A symbol to look up, so the loader can check the right library was loaded.
extern "C" int tessera_fake_cuda_version() { return 1; }
