#include "conformance/comm_cases.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

namespace llmk::conformance::commtest {
namespace {

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

llmk_comm_desc desc_for(const Device& device) {
  llmk_comm_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.device = device.device();
  desc.device_index = -1;
  desc.timeout_s = 60;  // a lost peer fails the case instead of hanging the suite
  desc.options = "{}";
  return desc;
}

bool is_refusal(int status) { return status == LLMK_ERR_INVALID_ARGUMENT || status == LLMK_ERR_UNSUPPORTED; }

}  // namespace

size_t element_bytes(uint32_t dtype) {
  switch (dtype) {
    case LLMK_DTYPE_F32:
    case LLMK_DTYPE_I32:
      return 4;
    case LLMK_DTYPE_F16:
    case LLMK_DTYPE_BF16:
      return 2;
    default:
      return 1;
  }
}

void store(uint32_t dtype, float v, void* base, size_t i) {
  auto* at = static_cast<uint8_t*>(base) + i * element_bytes(dtype);
  if (dtype == LLMK_DTYPE_F32) {
    std::memcpy(at, &v, 4);
  } else if (dtype == LLMK_DTYPE_BF16) {
    const uint16_t h = to_bf16(v);
    std::memcpy(at, &h, 2);
  } else if (dtype == LLMK_DTYPE_F16) {
    const auto h = static_cast<_Float16>(v);
    std::memcpy(at, &h, 2);
  } else {
    throw std::logic_error("store: not a float dtype");
  }
}

double load(uint32_t dtype, const void* base, size_t i) {
  const auto* at = static_cast<const uint8_t*>(base) + i * element_bytes(dtype);
  if (dtype == LLMK_DTYPE_F32) {
    float f;
    std::memcpy(&f, at, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, at, 2);
  if (dtype == LLMK_DTYPE_BF16) return from_bf16(h);
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}

double rounded(uint32_t dtype, float v) {
  std::vector<uint8_t> one(element_bytes(dtype));
  store(dtype, v, one.data(), 0);
  return load(dtype, one.data(), 0);
}

Comm::Comm(Plugin plugin, Device& device, void* self) : plugin_(std::move(plugin)), device_(&device), self_(self) {
  llmk_error err{};
  if (plugin_.comm().rank(self_, &rank_, &size_, &err) != LLMK_OK) {
    plugin_.comm().destroy(self_);
    throw Failure(std::string("rank() failed: ") + err.message);
  }
}

Comm Comm::world(const Plugin& plugin, Device& device) {
  const llmk_comm_desc desc = desc_for(device);
  char why[512] = {0};
  if (plugin.comm().supports(&desc, why, sizeof(why)) == 0) throw Failure(std::string("it refuses the desc: ") + why);
  llmk_error err{};
  void* self = plugin.comm().create(&desc, &err);
  if (self == nullptr) throw Failure(std::string("create() failed: ") + err.message);
  return Comm(plugin, device, self);
}

Comm::Comm(Comm&& other) noexcept
    : plugin_(std::move(other.plugin_)),
      device_(other.device_),
      self_(std::exchange(other.self_, nullptr)),
      rank_(other.rank_),
      size_(other.size_) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    if (self_ != nullptr) plugin_.comm().destroy(self_);
    plugin_ = std::move(other.plugin_);
    device_ = other.device_;
    self_ = std::exchange(other.self_, nullptr);
    rank_ = other.rank_;
    size_ = other.size_;
  }
  return *this;
}

Comm::~Comm() {
  if (self_ != nullptr) plugin_.comm().destroy(self_);
}

Comm Comm::split(int32_t color, int32_t key) {
  void* out = nullptr;
  ok(api().split(self_, color, key, &out, err()), "split");
  if (out == nullptr) throw Failure("split returned LLMK_OK and no communicator");
  return Comm(plugin_, *device_, out);
}

void Comm::ok(int status, const char* call) {
  if (status != LLMK_OK)
    throw Failure(std::string(call) + " returned status " + std::to_string(status) + ": " + err_.message);
  device_->synchronize();
}

void Cases::run(const std::string& name, const std::string& measure, double tolerance,
                const std::function<double()>& fn) {
  CaseResult c{name, CaseStatus::passed, measure, 0, tolerance, ""};
  try {
    c.error = fn();
    if (!(c.error <= tolerance)) c.status = CaseStatus::failed;
  } catch (const std::exception& e) {
    c.status = CaseStatus::failed;
    c.error = std::numeric_limits<double>::infinity();
    c.detail = e.what();
  }
  result_.cases.push_back(c);
}

void Cases::exact(const std::string& name, const std::function<void()>& fn) {
  CaseResult c{name, CaseStatus::passed, "", 0, 0, ""};
  try {
    fn();
  } catch (const std::exception& e) {
    c.status = CaseStatus::failed;
    c.detail = e.what();
  }
  result_.cases.push_back(c);
}

void Cases::exact_or_unsupported(const std::string& name, bool unsupported, const std::string& why,
                                 const std::function<void()>& fn) {
  if (unsupported) {
    result_.cases.push_back(CaseResult{name, CaseStatus::unsupported, "", 0, 0, why});
    return;
  }
  exact(name, fn);
}

void api_cases(const Plugin& plugin, Device& device, Cases& cases) {
  const std::string mine = device.device() == LLMK_DEVICE_CUDA ? "cuda" : "cpu";
  cases.exact("capabilities: a JSON object naming the devices served", [&] {
    const auto caps = nlohmann::json::parse(plugin.info().capabilities, nullptr, /*allow_exceptions=*/false);
    if (caps.is_discarded() || !caps.is_object())
      throw Failure("not a JSON object: " + std::string(plugin.info().capabilities));
    if (!caps.contains("devices") || !caps["devices"].is_array() || caps["devices"].empty())
      throw Failure("no \"devices\" list");
    bool listed = false;
    for (const auto& d : caps["devices"]) {
      if (!d.is_string()) throw Failure("\"devices\" holds " + d.dump() + ", not a name");
      listed = listed || d.get<std::string>() == mine;
    }
    if (!listed) throw Failure("\"devices\" does not list " + mine + ", where the suite runs it");
  });
  const llmk_comm_api& api = plugin.comm();
  cases.exact("table: struct_size and every entry", [&] {
    if (api.struct_size < sizeof(llmk_comm_api))
      throw Failure("struct_size " + std::to_string(api.struct_size) + " < " + std::to_string(sizeof(llmk_comm_api)));
    if (LLMK_API_VERSION_MAJOR(api.api_version) != LLMK_COMM_API_MAJOR)
      throw Failure("API major " + std::to_string(LLMK_API_VERSION_MAJOR(api.api_version)));
    const void* entries[] = {
        reinterpret_cast<const void*>(api.supports),    reinterpret_cast<const void*>(api.create),
        reinterpret_cast<const void*>(api.destroy),     reinterpret_cast<const void*>(api.rank),
        reinterpret_cast<const void*>(api.split),       reinterpret_cast<const void*>(api.all_reduce),
        reinterpret_cast<const void*>(api.all_gather),  reinterpret_cast<const void*>(api.broadcast),
        reinterpret_cast<const void*>(api.send),        reinterpret_cast<const void*>(api.recv),
        reinterpret_cast<const void*>(api.group_start), reinterpret_cast<const void*>(api.group_end),
        reinterpret_cast<const void*>(api.barrier),     reinterpret_cast<const void*>(api.abort)};
    for (size_t i = 0; i < std::size(entries); ++i)
      if (entries[i] == nullptr) throw Failure("entry " + std::to_string(i) + " is null");
  });
  if (api.supports == nullptr) return;  // the table case failed; nothing below can run
  cases.exact("a desc shorter than llmk_comm_desc is refused, naming struct_size", [&] {
    llmk_comm_desc desc = desc_for(device);
    desc.struct_size = 8;  // struct_size and device only
    char why[512] = {0};
    if (api.supports(&desc, why, sizeof(why)) != 0) throw Failure("accepted");
    if (std::string(why).find("struct_size") == std::string::npos)
      throw Failure("the reason names no struct_size: " + std::string(why));
  });
  cases.exact("a desc for another device is refused with a reason", [&] {
    llmk_comm_desc desc = desc_for(device);
    desc.device = device.device() == LLMK_DEVICE_CUDA ? LLMK_DEVICE_CPU : LLMK_DEVICE_CUDA;
    char why[512] = {0};
    if (api.supports(&desc, why, sizeof(why)) != 0) throw Failure("accepted");
    if (why[0] == '\0') throw Failure("no reason given");
  });
}

void bad_argument_cases(Comm& comm, Cases& cases) {
  DeviceBuffer buf(comm.device(), std::vector<float>(16, 1.f));
  // `status` refused, its message naming each of `names`.
  auto refused = [&](const char* what, int status, std::initializer_list<std::string> names) {
    if (status == LLMK_OK) throw Failure(std::string(what) + " was accepted");
    if (!is_refusal(status))
      throw Failure(std::string(what) + ": status " + std::to_string(status) +
                    ", not LLMK_ERR_INVALID_ARGUMENT or LLMK_ERR_UNSUPPORTED: " + comm.message());
    for (const std::string& name : names)
      if (comm.message().find(name) == std::string::npos)
        throw Failure(std::string(what) + ": the message names no \"" + name + "\": " + comm.message());
  };
  const auto& api = comm.api();
  cases.exact("bad argument: all_reduce of dtype 99", [&] {
    refused("dtype 99",
            api.all_reduce(comm.self(), buf.data(), buf.data(), 4, 99, LLMK_REDUCE_SUM, comm.queue(), comm.err()),
            {"dtype 99"});
  });
  cases.exact("bad argument: all_reduce with op 7", [&] {
    refused("op 7", api.all_reduce(comm.self(), buf.data(), buf.data(), 4, LLMK_DTYPE_F32, 7, comm.queue(), comm.err()),
            {"op 7"});
  });
  cases.exact("bad argument: all_reduce of a null send buffer", [&] {
    refused(
        "a null buffer",
        api.all_reduce(comm.self(), nullptr, buf.data(), 4, LLMK_DTYPE_F32, LLMK_REDUCE_SUM, comm.queue(), comm.err()),
        {"null"});
  });
  const std::string past = std::to_string(comm.size());
  cases.exact("bad argument: broadcast from root " + past + " (one past the last rank)", [&] {
    refused("the root",
            api.broadcast(comm.self(), buf.data(), 4, LLMK_DTYPE_F32, comm.size(), comm.queue(), comm.err()),
            {"root", past});
  });
  cases.exact("bad argument: send to peer -1", [&] {
    refused("peer -1", api.send(comm.self(), buf.data(), 4, LLMK_DTYPE_F32, -1, comm.queue(), comm.err()), {"-1"});
  });
  cases.exact("bad argument: recv from peer " + past, [&] {
    refused("the peer", api.recv(comm.self(), buf.data(), 4, LLMK_DTYPE_F32, comm.size(), comm.queue(), comm.err()),
            {past});
  });
  cases.exact("bad argument: group_end without group_start",
              [&] { refused("group_end", api.group_end(comm.self(), comm.queue(), comm.err()), {"group_start"}); });
  cases.exact("after the refusals the communicator still sums", [&] {
    DeviceBuffer one(comm.device(), std::vector<float>{static_cast<float>(comm.rank() + 1)});
    comm.ok(api.all_reduce(comm.self(), one.data(), one.data(), 1, LLMK_DTYPE_F32, LLMK_REDUCE_SUM, comm.queue(),
                           comm.err()),
            "all_reduce");
    std::vector<float> got(1);
    one.copy_out(got);
    const float want = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
    if (got[0] != want) throw Failure(std::to_string(got[0]) + ", not " + std::to_string(want));
  });
}

}  // namespace llmk::conformance::commtest
