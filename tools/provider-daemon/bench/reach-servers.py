# The servers of the reach benchmark (bench/reach.ts), python3's standard library only (the sandbox has no packages
# of its own). The same code runs inside the workload and on the host's loopback, for the direct comparison:
#   python3 -c "$(cat reach-servers.py)" stream|echo PORT     (PORT 0: any; the port is printed on the first line)
# `stream`: reads a byte count and a newline, sends that many zero bytes, then closes. `echo`: sends back what it
# reads, as it reads it, until the client closes. One thread per connection; Nagle off, as interactive servers do.
import socket, socketserver, sys

BLOCK = memoryview(bytes(1 << 20))


class Stream(socketserver.BaseRequestHandler):
    def handle(self):
        line = b""
        while not line.endswith(b"\n"):
            chunk = self.request.recv(64)
            if not chunk:
                return
            line += chunk
        left = int(line)
        while left > 0:
            n = min(left, len(BLOCK))
            self.request.sendall(BLOCK[:n])
            left -= n
        self.request.shutdown(socket.SHUT_WR)


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


mode, port = sys.argv[1], int(sys.argv[2])
server = Server(("127.0.0.1", port), Stream if mode == "stream" else Echo)
print(server.server_address[1], flush=True)
server.serve_forever()
