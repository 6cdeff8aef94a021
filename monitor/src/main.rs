fn main() {
    println!("monitor (in progress)");
}
