// The migrations are embedded by `sqlx::migrate!`, which cargo does not know
// reads them: a new or changed migration must rebuild the binary.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
