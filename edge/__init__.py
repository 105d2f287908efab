"""The edge broker: MQTT 3.1.1 for clients, labelled datagrams to and from the XDP broker."""
