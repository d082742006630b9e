//! Watch semantics and kube-runtime reflectors fed by the fake server, in-process and over HTTP.

use std::collections::BTreeSet;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        .unwrap()
}

async fn next<S: Stream + Unpin>(s: &mut S) -> S::Item {
    tokio::time::timeout(WAIT, s.next())
        .await
        .expect("timed out waiting for a watch event")
        .expect("stream ended")
}

fn summary(e: &WatchEvent<Pod>) -> String {
    match e {
        WatchEvent::Added(p) => format!("ADDED {}", p.name_any()),
        WatchEvent::Modified(p) => format!("MODIFIED {}", p.name_any()),
        WatchEvent::Deleted(p) => format!("DELETED {}", p.name_any()),
        WatchEvent::Bookmark(_) => "BOOKMARK".into(),
        WatchEvent::Error(s) => format!("ERROR {}", s.code),
    }
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_then_streams() {
    let s = FakeApiServer::new(Options::default());
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let a = pods
        .create(&PostParams::default(), &pod("a", json!({})))
        .await
        .unwrap();
    let from = a.resource_version().unwrap();
    pods.create(&PostParams::default(), &pod("b", json!({})))
        .await
        .unwrap();
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    pods.delete("b", &DeleteParams::default()).await.unwrap();

    let mut w = pods
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(summary(&next(&mut w).await.unwrap()));
    }
    assert_eq!(seen, ["ADDED b", "MODIFIED a", "DELETED b"]);
    pods.create(&PostParams::default(), &pod("c", json!({})))
        .await
        .unwrap();
    assert_eq!(summary(&next(&mut w).await.unwrap()), "ADDED c");

    // Resource versions in the stream increase and the DELETED object carries its own.
    let mut w = pods
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let mut last = from.parse::<u64>().unwrap();
    for _ in 0..4 {
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) =
            next(&mut w).await.unwrap()
        {
            let rv: u64 = p.resource_version().unwrap().parse().unwrap();
            assert!(rv > last);
            last = rv;
        }
    }
}

#[tokio::test]
async fn too_old_resource_versions_are_gone() {
    let s = FakeApiServer::new(Options {
        history_limit: 3,
        ..Options::default()
    });
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    let first = pods
        .create(&PostParams::default(), &pod("p0", json!({})))
        .await
        .unwrap();
    for i in 1..6 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}"), json!({})))
            .await
            .unwrap();
    }
    // The history holds 3 changes: the first resourceVersion fell out of it.
    let mut w = pods
        .watch(&WatchParams::default(), &first.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await.unwrap() {
        WatchEvent::Error(st) => {
            assert_eq!(st.code, 410);
            assert_eq!(st.reason, "Expired");
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(WAIT, w.next())
            .await
            .unwrap()
            .is_none(),
        "the stream ends after the error"
    );

    // A recent version still works; after a compaction it does not.
    let recent = pods.get("p5").await.unwrap().resource_version().unwrap();
    let mut ok = pods
        .watch(&WatchParams::default(), &recent)
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("p6", json!({})))
        .await
        .unwrap();
    assert_eq!(summary(&next(&mut ok).await.unwrap()), "ADDED p6");
    let page = pods.list(&ListParams::default().limit(2)).await.unwrap();
    // Compaction at revision R keeps R readable (as etcd does): move past the list first.
    pods.create(&PostParams::default(), &pod("p7", json!({})))
        .await
        .unwrap();
    assert_eq!(summary(&next(&mut ok).await.unwrap()), "ADDED p7");
    s.compact();
    let mut gone = pods
        .watch(&WatchParams::default(), &recent)
        .await
        .unwrap()
        .boxed();
    assert_eq!(summary(&next(&mut gone).await.unwrap()), "ERROR 410");
    // Continue tokens from before the compaction expire too.
    let token = page.metadata.continue_.unwrap();
    let err = pods
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(st) if st.code == 410));
    // expire_watches ends open watches with 410.
    s.expire_watches();
    assert_eq!(summary(&next(&mut ok).await.unwrap()), "ERROR 410");
}

#[tokio::test]
async fn bookmarks_selector_transitions_and_initial_events() {
    let s = FakeApiServer::new(Options {
        bookmark_interval: Duration::from_millis(50),
        ..Options::default()
    });
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    pods.create(&PostParams::default(), &pod("a", json!({"app": "web"})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("b", json!({"app": "db"})))
        .await
        .unwrap();
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    let wp = WatchParams::default().labels("app=web");
    let mut w = pods.watch(&wp, &rv).await.unwrap().boxed();
    match next(&mut w).await.unwrap() {
        WatchEvent::Bookmark(b) => {
            assert!(b.metadata.resource_version.parse::<u64>().unwrap() >= rv.parse().unwrap())
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // Leaving the selector looks like a deletion, entering it like a creation.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    pods.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let e = summary(&next(&mut w).await.unwrap());
        if e != "BOOKMARK" {
            seen.push(e);
        }
    }
    assert_eq!(seen, ["DELETED a", "ADDED b"]);

    // sendInitialEvents: the current state as ADDED, then the initial-events-end bookmark.
    let mut w = pods
        .watch(&WatchParams::streaming_lists(), "")
        .await
        .unwrap()
        .boxed();
    assert_eq!(summary(&next(&mut w).await.unwrap()), "ADDED a");
    assert_eq!(summary(&next(&mut w).await.unwrap()), "ADDED b");
    match next(&mut w).await.unwrap() {
        WatchEvent::Bookmark(b) => assert!(
            b.metadata
                .annotations
                .contains_key("k8s.io/initial-events-end")
        ),
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
}

fn names<K: kube::Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> BTreeSet<String> {
    store.state().iter().map(|o| o.name_any()).collect()
}

/// Polls the reflector stream until `done` holds for the store.
async fn pump<S, K>(stream: &mut S, store: &Store<K>, done: impl Fn(&Store<K>) -> bool)
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Unpin,
    K: kube::Resource<DynamicType = ()> + Clone,
{
    while !done(store) {
        let _ = next(stream).await;
    }
}

#[tokio::test]
async fn reflector_builds_a_correct_store_and_recovers_after_410() {
    let s = FakeApiServer::new(Options::default());
    let client = s.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for n in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(n, json!({"v": "0"})))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store::<Pod>();
    // Small pages so the initial list uses continue tokens too.
    let cfg = watcher::Config::default().page_size(2);
    let mut stream = reflector::reflector(writer, watcher(pods.clone(), cfg)).boxed();
    pump(&mut stream, &reader, |st| names(st).len() == 3).await;

    // Live changes arrive through the watch.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "1"}}})),
    )
    .await
    .unwrap();
    pods.delete("c", &DeleteParams::default()).await.unwrap();
    pump(&mut stream, &reader, |st| {
        names(st) == BTreeSet::from(["a".to_string(), "b".to_string()])
            && st
                .state()
                .iter()
                .any(|p| p.name_any() == "a" && p.labels()["v"] == "1")
    })
    .await;

    // Force a 410: compact the history and end the watch. The stream reports the error...
    s.compact();
    s.expire_watches();
    loop {
        match next(&mut stream).await {
            Err(watcher::Error::WatchError(st)) if st.code == 410 => break,
            Err(e) => panic!("unexpected error {e:?}"),
            Ok(_) => {}
        }
    }
    // ...and while it is not being polled (no request in flight), the world changes: these
    // events are never seen by any watch, so only the relist can reveal them.
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    pods.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &pod("d", json!({"v": "0"})))
        .await
        .unwrap();
    loop {
        if let Ok(watcher::Event::InitDone) = next(&mut stream).await {
            break;
        }
    }
    assert_eq!(
        names(&reader),
        BTreeSet::from(["b".to_string(), "d".to_string()])
    );
    let b = reader
        .state()
        .into_iter()
        .find(|p| p.name_any() == "b")
        .unwrap();
    assert_eq!(b.labels()["v"], "2");
    // The store matches the server exactly, resourceVersions included.
    for p in pods.list(&ListParams::default()).await.unwrap() {
        let cached = reader
            .state()
            .into_iter()
            .find(|c| c.name_any() == p.name_any())
            .unwrap();
        assert_eq!(cached.resource_version(), p.resource_version());
    }
    // And the watch resumed from the relist's version: new changes keep flowing.
    pods.create(&PostParams::default(), &pod("e", json!({})))
        .await
        .unwrap();
    pump(&mut stream, &reader, |st| names(st).contains("e")).await;
}

#[tokio::test]
async fn reflector_over_http_with_a_kubeconfig() {
    let opts = Options {
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    };
    let running = FakeApiServer::new(opts)
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    assert!(running.url().starts_with("http://127.0.0.1:"));
    assert!(running.kubeconfig_yaml().contains(&running.url()));
    // The same path a controller takes: kubeconfig -> Config -> Client, over plain HTTP.
    let client: Client = running.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &node("n0"))
        .await
        .unwrap();

    let (reader, writer) = reflector::store::<Node>();
    // One-second watches: the watcher must resume from its last bookmark/event without gaps.
    let cfg = watcher::Config::default().timeout(1);
    let stream = reflector::reflector(writer, watcher(nodes.clone(), cfg))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    reader.wait_until_ready().await.unwrap();
    for i in 1..=6 {
        nodes
            .create(&PostParams::default(), &node(&format!("n{i}")))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    nodes.delete("n3", &DeleteParams::default()).await.unwrap();
    let want: BTreeSet<String> = ["n0", "n1", "n2", "n4", "n5", "n6"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let deadline = tokio::time::Instant::now() + WAIT;
    while names(&reader) != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "store {:?} != {want:?}",
            names(&reader)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    running.shutdown().await;
}

#[tokio::test]
async fn metadata_watcher_gets_partial_objects() {
    let s = FakeApiServer::new(Options::default());
    let pods: Api<Pod> = Api::default_namespaced(s.client());
    pods.create(&PostParams::default(), &pod("m", json!({"k": "v"})))
        .await
        .unwrap();
    // kube 5 sends `Accept: ...;as=PartialObjectMetadataList` for this type.
    let metas: Api<PartialObjectMeta<Pod>> = Api::default_namespaced(s.client());
    let mut w = watcher(metas, watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitApply(meta) = next(&mut w).await.unwrap() {
            assert_eq!(meta.name_any(), "m");
            assert_eq!(meta.labels()["k"], "v");
            break;
        }
    }
}
