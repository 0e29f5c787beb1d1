// llmk_hello MODEL_DIR [PROMPT]: greedy-generates 24 tokens through an
// installed llmk's Engine and prints them. Exit status 0 when generation
// finished normally.
#include <actors/engine.hpp>
#include <core/error.hpp>

#include <chrono>
#include <iostream>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: llmk_hello MODEL_DIR [PROMPT]\n";
    return 2;
  }
  try {
    llmk::EngineConfig config;
    config.model.path = argv[1];
    config.plugins.search_path = {LLMK_PLUGIN_DIR};
    config.kv_cache.capacity_tokens = 4096;
    llmk::Engine engine(config);

    llmk::Request request;
    request.id = "hello";
    request.prompt = argc > 2 ? argv[2] : "Once upon a time";
    request.sampling.temperature = 0;
    request.sampling.max_tokens = 24;
    auto stream = engine.submit(request);
    llmk::FinishReason finish = llmk::FinishReason::none;
    std::cout << request.prompt;
    while (auto event = stream->next(std::chrono::seconds(30))) {
      std::cout << event->text_delta << std::flush;
      if (event->finished) finish = event->finish_reason;
    }
    std::cout << "\n[finish: " << llmk::to_string(finish) << "]\n";
    return finish == llmk::FinishReason::stop || finish == llmk::FinishReason::length ? 0 : 1;
  } catch (const llmk::Error& e) {
    std::cerr << "llmk_hello: " << e.what() << '\n';
    return 1;
  }
}
