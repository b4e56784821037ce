//! rxe-net
