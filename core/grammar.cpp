#include "core/grammar.hpp"

#include <algorithm>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/error.hpp"
#include "core/tokenizer.hpp"

#if LLMK_HAVE_XGRAMMAR
#include <xgrammar/xgrammar.h>
#endif

namespace llmk {

const char* to_string(GrammarKind kind) noexcept {
  switch (kind) {
    case GrammarKind::json_object: return "json_object";
    case GrammarKind::json_schema: return "json_schema";
    case GrammarKind::regex: return "regex";
    case GrammarKind::ebnf: return "grammar";
  }
  return "?";
}

bool structured_outputs_available() noexcept { return LLMK_HAVE_XGRAMMAR != 0; }

const char* structured_outputs_missing() noexcept {
  return LLMK_HAVE_XGRAMMAR ? ""
                            : "structured outputs need XGrammar, which this build of llmk lacks "
                              "(scripts/setup.sh builds it; then configure with LLMK_XGRAMMAR_ROOT)";
}

std::string structured_outputs_refusal(const std::string& executor_device) {
  if (!structured_outputs_available()) return structured_outputs_missing();
  if (executor_device != "cpu" && executor_device != "cuda")
    return "structured outputs are applied by the CPU and CUDA samplers only; executor.device is '" +
           executor_device + "'";
  return "";
}

#if LLMK_HAVE_XGRAMMAR

namespace {

// XGrammar's errors read "[HH:MM:SS] /path/file.cc:LINE: message\n", some
// messages "Check failed: (cond) is false: reason": the reason alone.
std::string xgrammar_message(const std::exception& e) {
  std::string what = e.what();
  if (!what.empty() && what.front() == '[') {
    size_t source = what.find(".cc:");
    if (source == std::string::npos) source = what.find(".h:");
    size_t colon = source == std::string::npos ? std::string::npos : what.find(": ", source);
    if (colon != std::string::npos) what = what.substr(colon + 2);
  }
  if (what.rfind("Check failed: ", 0) == 0) {
    if (size_t reason = what.find(" is false: "); reason != std::string::npos) what = what.substr(reason + 11);
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return what;
}

DLTensor bitmask_tensor(std::span<uint32_t> words, int64_t* shape) {
  shape[0] = static_cast<int64_t>(words.size());
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

}  // namespace

class CompiledGrammar {
 public:
  CompiledGrammar(xgrammar::CompiledGrammar grammar, int32_t vocab_size, std::vector<int32_t> stop_ids)
      : grammar(std::move(grammar)), vocab_size(vocab_size), stop_ids(std::move(stop_ids)) {}
  xgrammar::CompiledGrammar grammar;
  int32_t vocab_size;
  std::vector<int32_t> stop_ids;
};

struct GrammarCompiler::Impl {
  Impl(xgrammar::TokenizerInfo info, int32_t vocab_size, std::vector<int32_t> stop_ids)
      : compiler(info, std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 8),
                 /*cache_enabled=*/false),
        vocab_size(vocab_size),
        stop_ids(std::move(stop_ids)) {}
  xgrammar::GrammarCompiler compiler;
  int32_t vocab_size;
  std::vector<int32_t> stop_ids;
  // Compiled grammars by kind and text, least recently used last.
  static constexpr size_t kMaxCached = 256;
  std::mutex mutex;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru;
  std::unordered_map<std::string, decltype(lru)::iterator> cached;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> stop_ids) {
  const int32_t num_tokens = std::min(tokenizer.vocab_size(), vocab_size);
  std::vector<std::string> vocab(static_cast<size_t>(num_tokens));
  for (int32_t id = 0; id < num_tokens; ++id) {
    const auto kind = tokenizer.piece_kind(id);
    // "" is XGrammar's special token: never allowed inside the text.
    if (kind == Tokenizer::PieceKind::normal || kind == Tokenizer::PieceKind::byte)
      vocab[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  stop_ids.erase(std::remove_if(stop_ids.begin(), stop_ids.end(),
                                [&](int32_t id) { return id < 0 || id >= num_tokens; }),
                 stop_ids.end());
  if (stop_ids.empty())
    throw Error(ErrorCode::unsupported, "structured outputs need an end-of-sequence token, and '" +
                                            tokenizer.model_file().string() + "' names none");
  xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, vocab_size, stop_ids, /*add_prefix_space=*/false);
  impl_ = std::make_unique<Impl>(std::move(info), vocab_size, std::move(stop_ids));
}

GrammarCompiler::~GrammarCompiler() = default;

int32_t GrammarCompiler::vocab_size() const { return impl_->vocab_size; }

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const StructuredOutput& spec) {
  const std::string key = std::string(to_string(spec.kind)) + '\n' + spec.text;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (auto it = impl_->cached.find(key); it != impl_->cached.end()) {
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
      return it->second->second;
    }
  }
  std::optional<xgrammar::CompiledGrammar> compiled;
  try {
    switch (spec.kind) {
      case GrammarKind::json_object:
        compiled = impl_->compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                                     std::nullopt, std::nullopt, /*strict_mode=*/false);
        break;
      case GrammarKind::json_schema:
        // Compact separators: no run of free whitespace for a small model to
        // wander into. Strict: properties a schema does not list are refused
        // unless it allows them (OpenAI's strict mode).
        compiled = impl_->compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt,
                                                     std::nullopt, /*strict_mode=*/true);
        break;
      case GrammarKind::regex: compiled = impl_->compiler.CompileRegex(spec.text); break;
      case GrammarKind::ebnf: compiled = impl_->compiler.CompileGrammar(spec.text, "root"); break;
    }
  } catch (const std::exception& e) {
    throw FieldError(spec.field, spec.field + ": " + xgrammar_message(e));
  }
  auto grammar = std::make_shared<const CompiledGrammar>(std::move(*compiled), impl_->vocab_size, impl_->stop_ids);
  // A grammar no text satisfies allows no token at its start.
  GrammarMatcher probe(grammar);
  std::vector<uint32_t> mask(static_cast<size_t>(bitmask_words(impl_->vocab_size)));
  probe.fill_next_mask(mask);
  if (std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; }))
    throw FieldError(spec.field, spec.field + ": no text satisfies this " + to_string(spec.kind));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (auto it = impl_->cached.find(key); it != impl_->cached.end()) return it->second->second;
  impl_->lru.emplace_front(key, grammar);
  impl_->cached[key] = impl_->lru.begin();
  if (impl_->lru.size() > Impl::kMaxCached) {
    impl_->cached.erase(impl_->lru.back().first);
    impl_->lru.pop_back();
  }
  return grammar;
}

struct GrammarMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledGrammar> g) : grammar(std::move(g)), matcher(grammar->grammar) {}
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) {
  if (!grammar) throw Error(ErrorCode::internal, "a grammar matcher without a compiled grammar");
  impl_ = std::make_unique<Impl>(std::move(grammar));
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

bool GrammarMatcher::accept(int32_t token) {
  if (impl_->matcher.IsTerminated() || token < 0 || token >= impl_->grammar->vocab_size) return false;
  return impl_->matcher.AcceptToken(token);
}

void GrammarMatcher::rollback(int32_t num_tokens) {
  if (num_tokens > 0) impl_->matcher.Rollback(num_tokens);
}

bool GrammarMatcher::fill_next_mask(std::span<uint32_t> bitmask) {
  const int32_t vocab = impl_->grammar->vocab_size;
  if (bitmask.size() != static_cast<size_t>(bitmask_words(vocab)))
    throw Error(ErrorCode::internal, "a token bitmask of " + std::to_string(bitmask.size()) + " words for " +
                                         std::to_string(vocab) + " tokens");
  if (impl_->matcher.IsTerminated()) {  // only a stop token may follow
    std::fill(bitmask.begin(), bitmask.end(), 0u);
    for (int32_t id : impl_->grammar->stop_ids) bitmask[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
    return true;
  }
  int64_t shape[1];
  DLTensor tensor = bitmask_tensor(bitmask, shape);
  const bool restricts = impl_->matcher.FillNextTokenBitmask(&tensor);
  if (vocab % 32 != 0) bitmask.back() &= (1u << (vocab % 32)) - 1;  // no id past the vocabulary
  return restricts;
}

bool GrammarMatcher::terminated() const { return impl_->matcher.IsTerminated(); }
bool GrammarMatcher::completed() const { return impl_->matcher.IsCompleted(); }
int32_t GrammarMatcher::vocab_size() const { return impl_->grammar->vocab_size; }

#else  // no XGrammar: the same API, refusing

class CompiledGrammar {};
struct GrammarCompiler::Impl {};
struct GrammarMatcher::Impl {};

GrammarCompiler::GrammarCompiler(const Tokenizer&, int32_t, std::vector<int32_t>) {
  throw Error(ErrorCode::unsupported, structured_outputs_missing());
}
GrammarCompiler::~GrammarCompiler() = default;
int32_t GrammarCompiler::vocab_size() const { return 0; }
std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const StructuredOutput& spec) {
  throw FieldError(spec.field, spec.field + ": " + structured_outputs_missing(), ErrorCode::unsupported);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar>) {
  throw Error(ErrorCode::unsupported, structured_outputs_missing());
}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
bool GrammarMatcher::accept(int32_t) { return false; }
void GrammarMatcher::rollback(int32_t) {}
bool GrammarMatcher::fill_next_mask(std::span<uint32_t>) { return false; }
bool GrammarMatcher::terminated() const { return false; }
bool GrammarMatcher::completed() const { return false; }
int32_t GrammarMatcher::vocab_size() const { return 0; }

#endif

}  // namespace llmk
