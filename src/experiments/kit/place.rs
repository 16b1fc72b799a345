//! Placement counters: whether a pinned thread stayed on its CPU throughout.
