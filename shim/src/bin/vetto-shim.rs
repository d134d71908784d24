//! `vetto-shim`: a runc-compatible OCI runtime with vetto's hardening (see `vetto::oci`).

fn main() -> std::process::ExitCode {
    vetto::oci::main()
}
