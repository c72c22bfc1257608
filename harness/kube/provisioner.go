package main

// The test cluster's PVC provisioner (`sbx-kube local-provisioner`): for every claim of a
// StorageClass whose provisioner is provisionerName, it makes a directory under -dir and a `local`
// PersistentVolume pinned to the node, bound to the claim; when such a volume is Released and its
// reclaim policy is Delete, it removes the directory and the volume. `local` rather than `hostPath`
// volumes because the kubelet applies a pod's fsGroup to local volumes (not to hostPath ones), so a
// box running as uid 1000 can write its workspace, as on clusters with a CSI driver.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

const (
	provisionerName   = "sbx.local/hostdir"
	annProvisioner    = "volume.kubernetes.io/storage-provisioner"
	annBetaProvision  = "volume.beta.kubernetes.io/storage-provisioner"
	annProvisionedBy  = "pv.kubernetes.io/provisioned-by"
	hostnameNodeLabel = "kubernetes.io/hostname"
)

type provisioner struct {
	client kubernetes.Interface
	dir    string
	node   string
	pvcs   cache.Indexer
	pvs    cache.Indexer
	scs    cache.Indexer
}

func runProvisioner(args []string) int {
	fs := flag.NewFlagSet("local-provisioner", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of an identity that may manage PVs and read PVCs and StorageClasses")
	dir := fs.String("dir", "", "directory under which each volume gets a directory")
	node := fs.String("node", "", "the node's name (the volumes' node affinity, kubernetes.io/hostname)")
	_ = fs.Parse(args)
	if *kubeconfig == "" || *dir == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "local-provisioner: -kubeconfig, -dir and -node are required")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.ErrorS(err, "kubeconfig")
		return 1
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.ErrorS(err, "client")
		return 1
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		klog.ErrorS(err, "volume directory")
		return 1
	}
	f := informers.NewSharedInformerFactory(client, 5*time.Minute)
	p := &provisioner{client: client, dir: *dir, node: *node,
		pvcs: f.Core().V1().PersistentVolumeClaims().Informer().GetIndexer(),
		pvs:  f.Core().V1().PersistentVolumes().Informer().GetIndexer(),
		scs:  f.Storage().V1().StorageClasses().Informer().GetIndexer(),
	}
	kick := make(chan struct{}, 1)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger(kick) },
		UpdateFunc: func(any, any) { trigger(kick) },
		DeleteFunc: func(any) { trigger(kick) },
	}
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().PersistentVolumeClaims().Informer(),
		f.Core().V1().PersistentVolumes().Informer(), f.Storage().V1().StorageClasses().Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			klog.ErrorS(err, "event handler")
			return 1
		}
	}
	ctx := context.Background()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	klog.InfoS("local-provisioner running", "provisioner", provisionerName, "dir", *dir, "node", *node)
	tick := time.NewTicker(30 * time.Second)
	for {
		p.reconcile(ctx)
		select {
		case <-kick:
		case <-tick.C:
		}
	}
}

func trigger(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// reconcile makes the volumes that claims are waiting for and deletes the released ones.
func (p *provisioner) reconcile(ctx context.Context) {
	for _, o := range p.pvcs.List() {
		pvc := o.(*v1.PersistentVolumeClaim)
		if pvc.Spec.VolumeName != "" || pvc.Status.Phase != v1.ClaimPending || pvc.DeletionTimestamp != nil {
			continue
		}
		if pvc.Annotations[annProvisioner] != provisionerName && pvc.Annotations[annBetaProvision] != provisionerName {
			continue
		}
		if err := p.provision(ctx, pvc); err != nil {
			klog.ErrorS(err, "provision", "claim", klog.KObj(pvc))
		}
	}
	for _, o := range p.pvs.List() {
		pv := o.(*v1.PersistentVolume)
		if pv.Annotations[annProvisionedBy] != provisionerName || pv.Status.Phase != v1.VolumeReleased ||
			pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete || pv.DeletionTimestamp != nil {
			continue
		}
		if err := p.remove(ctx, pv); err != nil {
			klog.ErrorS(err, "delete", "volume", pv.Name)
		}
	}
}

func (p *provisioner) provision(ctx context.Context, pvc *v1.PersistentVolumeClaim) error {
	name := "pvc-" + string(pvc.UID)
	if _, exists, _ := p.pvs.GetByKey(name); exists {
		return nil // made already; the PV controller binds it
	}
	sc := ""
	if pvc.Spec.StorageClassName != nil {
		sc = *pvc.Spec.StorageClassName
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if o, ok, _ := p.scs.GetByKey(sc); ok {
		if rp := o.(*storagev1.StorageClass).ReclaimPolicy; rp != nil {
			reclaim = *rp
		}
	}
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(path, 0o777); err != nil {
		return err
	}
	// World-writable, as a fresh disk a box can use whatever its uid; a pod's fsGroup makes it the
	// group's (the kubelet applies fsGroup to local volumes).
	if err := os.Chmod(path, 0o777); err != nil {
		return err
	}
	capacity := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	mode := v1.PersistentVolumeFilesystem
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: provisionerName}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: capacity},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              sc,
			VolumeMode:                    &mode,
			ClaimRef: &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: path}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: hostnameNodeLabel, Operator: v1.NodeSelectorOpIn, Values: []string{p.node}}},
			}}}},
		},
	}
	if _, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	klog.InfoS("provisioned", "claim", klog.KObj(pvc), "volume", name, "path", path)
	return nil
}

func (p *provisioner) remove(ctx context.Context, pv *v1.PersistentVolume) error {
	if pv.Spec.Local == nil {
		return nil
	}
	path := filepath.Clean(pv.Spec.Local.Path)
	if filepath.Dir(path) != filepath.Clean(p.dir) || !strings.HasPrefix(filepath.Base(path), "pvc-") {
		return fmt.Errorf("refusing to delete %s: not a volume directory under %s", path, p.dir)
	}
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	klog.InfoS("deleted", "volume", pv.Name, "path", path)
	return nil
}
