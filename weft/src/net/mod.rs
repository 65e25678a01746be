//! Sockets whose blocking calls park the task, not the worker.
