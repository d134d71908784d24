//! vetto network broker (in progress).
