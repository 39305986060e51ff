"""Local Kubernetes control plane (shell): etcd, kube-apiserver, KCM, kube-scheduler and KWOK."""
