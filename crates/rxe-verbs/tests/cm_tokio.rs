//! Runs the `cm_tokio` example's body under tokio (127.0.140.50/51).

#[path = "../examples/cm_tokio.rs"]
mod example;

#[tokio::test]
async fn listen_and_connect_with_await() {
    let msg = b"sixteen bytes ok";
    let got = example::run("127.0.140.50", "127.0.140.51", 7175, msg)
        .await
        .expect("the example runs");
    assert_eq!(got, msg);
}
