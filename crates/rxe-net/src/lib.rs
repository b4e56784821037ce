//! rxe-net owns rxe's I/O. Today: reading and writing captures; the UDP device and driver
//! loop come with the device issue.

pub mod capture;
