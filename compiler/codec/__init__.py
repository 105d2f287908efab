"""Packets and messages: decoding and building frames, pcap files, human renderings of values."""
