//! Why the provider reads operations itself: the client library's poller reports a DONE
//! operation that carries `error` as a success (`until_done` is `Ok`), so a launch that met
//! `ZONE_RESOURCE_POOL_EXHAUSTED` would look launched. `launch::outcome` sees the error.

use fake_compute::FakeCompute;
use google_cloud_compute_v1::client::Instances;
use google_cloud_compute_v1::model::Instance;
use google_cloud_lro::Poller;
use provider_gcp::launch::{self, OpOutcome};

#[tokio::test]
async fn the_library_poller_returns_ok_for_a_failed_operation() {
    let fake = FakeCompute::new("fake-project");
    fake.fail_inserts(None, None, None, "ZONE_RESOURCE_POOL_EXHAUSTED", None);
    let addr = fake.serve().await.unwrap();
    let client = Instances::builder()
        .with_endpoint(format!("http://{addr}"))
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .build()
        .await
        .unwrap();
    let op = client
        .insert()
        .set_project("fake-project")
        .set_zone("us-central1-a")
        .set_body(
            Instance::new()
                .set_name("vm-1")
                .set_machine_type("zones/us-central1-a/machineTypes/n2-standard-8"),
        )
        .poller()
        .until_done()
        .await
        .expect("the poller calls a DONE operation a success, error or not");
    let errors = &op
        .error
        .as_ref()
        .expect("the operation carries the error")
        .errors;
    assert_eq!(
        errors[0].code.as_deref(),
        Some("ZONE_RESOURCE_POOL_EXHAUSTED")
    );
    assert!(matches!(
        launch::outcome(&op),
        OpOutcome::Failed {
            unavailable: true,
            ..
        }
    ));
    assert!(fake.instances().is_empty());
}
