// IpcSocketFile: a ZeroMQ socket bound to ipc://PATH leaves PATH behind when
// it closes (libzmq 4.3); its owner's IpcSocketFile removes it, unless
// another socket has bound the same path since.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "ipc/ipc_socket_file.hpp"

namespace {

std::filesystem::path socket_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("llmk_ipc_file_" + name + "_" + std::to_string(::getpid()));
}

}  // namespace

TEST_CASE("a bound ipc:// socket's file is removed by its IpcSocketFile, and only while it is still its own",
          "[zmq][ipc_file]") {
  zmq::context_t context;
  const auto path = socket_path("own");
  {
    zmq::socket_t socket(context, zmq::socket_type::pub);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind("ipc://" + path.string());
    llmk::ipc::IpcSocketFile file(socket.get(zmq::sockopt::last_endpoint));
    CHECK(file.path() == path.string());
    socket.close();
    CHECK(std::filesystem::exists(path));  // what libzmq leaves behind
  }
  CHECK_FALSE(std::filesystem::exists(path));

  // A second socket binds the same path while the first still holds it (a
  // restarted server): the first one's file object leaves the new file be.
  const auto shared = socket_path("shared");
  zmq::socket_t first(context, zmq::socket_type::pub), second(context, zmq::socket_type::pub);
  first.set(zmq::sockopt::linger, 0);
  second.set(zmq::sockopt::linger, 0);
  first.bind("ipc://" + shared.string());
  auto first_file = std::make_unique<llmk::ipc::IpcSocketFile>(first.get(zmq::sockopt::last_endpoint));
  second.bind("ipc://" + shared.string());  // replaces the file
  llmk::ipc::IpcSocketFile second_file(second.get(zmq::sockopt::last_endpoint));
  first_file.reset();
  CHECK(std::filesystem::exists(shared));
  second.close();
  first.close();
}

TEST_CASE("IpcSocketFile owns nothing for tcp and inproc endpoints", "[zmq][ipc_file]") {
  CHECK(llmk::ipc::IpcSocketFile("tcp://127.0.0.1:5555").path().empty());
  CHECK(llmk::ipc::IpcSocketFile("inproc://x").path().empty());
  CHECK(llmk::ipc::IpcSocketFile("ipc://" + socket_path("absent").string()).path().empty());
}
