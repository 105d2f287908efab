"""The BPF C sources the ebpf back end specialises (shipped as package data: camus.bpf)."""
