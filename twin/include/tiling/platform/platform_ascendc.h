// The twin's tiling/platform/platform_ascendc.h: the part of CANN's PlatformAscendC that the host code
// uses, with CANN's names and signatures. CANN fills fe::PlatFormInfos from the device's SoC
// description and keeps it opaque; the twin defines it as a plain struct of the same facts, which the
// twin module fills from the SoC table in op_host (rope_matrix::platform_for_soc).
#pragma once

#include <cstdint>

namespace fe {
class PlatFormInfos {
 public:
  uint32_t aicNum = 0, aivNum = 0;
  uint64_t ubBytes = 0;                  // as GetCoreMemSize(UB) reports it (minus the 256-byte reserve)
  uint64_t l1Bytes = 512 * 1024;         // Atlas A2 (910B) sizes
  uint64_t l0aBytes = 64 * 1024, l0bBytes = 64 * 1024, l0cBytes = 128 * 1024;
  uint32_t libApiWorkspaceBytes = 16u << 20;
};
}  // namespace fe

namespace platform_ascendc {

enum class CoreMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6, FB = 7, BT = 8, RESERVED };
enum class SocVersion { ASCEND910 = 0, ASCEND910B, ASCEND310P, ASCEND310B, RESERVED_VERSION = 99999 };

class PlatformAscendC {
 public:
  PlatformAscendC() = delete;
  explicit PlatformAscendC(fe::PlatFormInfos* platformInfo) : info_(platformInfo) {}
  uint32_t GetCoreNum() const { return info_->aivNum; }
  uint32_t GetCoreNumAic() const { return info_->aicNum; }
  uint32_t GetCoreNumAiv() const { return info_->aivNum; }
  uint32_t GetLibApiWorkSpaceSize() const { return info_->libApiWorkspaceBytes; }
  SocVersion GetSocVersion() const { return SocVersion::ASCEND910B; }
  void GetCoreMemSize(const CoreMemType& memType, uint64_t& size) const {
    switch (memType) {
      case CoreMemType::UB: size = info_->ubBytes; break;
      case CoreMemType::L1: size = info_->l1Bytes; break;
      case CoreMemType::L0_A: size = info_->l0aBytes; break;
      case CoreMemType::L0_B: size = info_->l0bBytes; break;
      case CoreMemType::L0_C: size = info_->l0cBytes; break;
      default: size = 0; break;
    }
  }

 private:
  fe::PlatFormInfos* info_;
};

// Declared as in CANN (the instance of the current device); the twin has no device, so only code
// that runs on the NPU (torch_interface.cpp) calls it, and the twin defines neither function.
class PlatformAscendCManager {
 public:
  static PlatformAscendC* GetInstance();
  static PlatformAscendC* GetInstance(const char* customSocVersion);

 private:
  PlatformAscendCManager();
};

}  // namespace platform_ascendc
