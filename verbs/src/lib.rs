//! Verbs over DEVX.
