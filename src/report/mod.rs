//! Renderers: they read a results document and never measure.

pub mod terminal;
