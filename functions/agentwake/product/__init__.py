"""The product API and its services: live turns and the conversation (``sessions``), tasks a product
registers and completes (``tasks``), the HTTP routes over them (``api``), and the producer contract
generated from their models (``contract``)."""
