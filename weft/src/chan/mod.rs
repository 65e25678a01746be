//! Channels: Go's `chan` and `select`, parking tasks (or blocking plain threads).
