"""The scheduling node: Thrift handler, task store, loader, DelayQueue, dispatcher and recorder."""
