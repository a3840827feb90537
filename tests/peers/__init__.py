"""Local stand-ins for the APIs `tpu-rl` talks to, on 127.0.0.1 only, answering in the real JSON shapes."""
