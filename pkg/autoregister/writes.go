package autoregister

import (
	"context"
	"fmt"
	"time"

	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshplane/discovery/pkg/model"
)

// The writes read the entry from the API server, not the informer: a
// decision about who owns an entry must see the other replicas' last
// writes, and a conflict on update makes the worker read again.

// connect creates the entry from its group, or marks the existing one
// connected to this replica. settled reports that nothing more is to be
// done while the stream lasts (the entry is another replica's, or may not
// be controlled by this proxy).
func (c *Controller) connect(ctx context.Context, key types.NamespacedName, s snapshot) (settled bool, err error) {
	api := c.client.NetworkingV1().WorkloadEntries(key.Namespace)
	log := c.log.With("entry", key.String(), "proxy", model.Clip(s.proxy.ID))
	we, err := api.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !s.auto {
		c.m.errors.WithLabelValues("no_entry").Inc()
		log.Warn("the WorkloadEntry the proxy names was deleted; its health is not written")
		return true, nil
	}
	if apierrors.IsNotFound(err) {
		group, gerr := c.client.NetworkingV1().WorkloadGroups(key.Namespace).Get(ctx, s.group, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			c.m.errors.WithLabelValues("no_group").Inc()
			log.Warn("WorkloadEntry not created: its WorkloadGroup was deleted", "workloadGroup", s.group)
			return true, nil
		}
		if gerr != nil {
			return false, fmt.Errorf("read WorkloadGroup %s/%s: %w", key.Namespace, s.group, gerr)
		}
		we = EntryFromGroup(key.Name, s.proxy, group)
		if err := CheckIdentity(&s.caller, key.Namespace, we.Spec.GetServiceAccount()); err != nil {
			c.m.errors.WithLabelValues("identity").Inc()
			log.Warn("WorkloadEntry not created", "reason", err.Error())
			return true, nil
		}
		setConnected(we, c.opts.Replica, s.connectedAt)
		if _, err := api.Create(ctx, we, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return false, fmt.Errorf("create: %w", err)
		}
		c.m.success.Inc()
		log.Info("auto-registered WorkloadEntry", "healthChecks", s.proxy.Metadata.ReadinessProbe)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read: %w", err)
	}
	if err := CheckIdentity(&s.caller, key.Namespace, we.Spec.GetServiceAccount()); err != nil {
		c.m.errors.WithLabelValues("identity").Inc()
		log.Warn("existing WorkloadEntry not adopted", "reason", err.Error())
		return true, nil
	}
	write, why := connectVerdict(we, c.opts.Replica, s.connectedAt)
	if !write {
		log.Debug("WorkloadEntry left as it is", "why", why)
		return why != "already recorded", nil
	}
	setConnected(we, c.opts.Replica, s.connectedAt)
	if _, err := api.Update(ctx, we, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return false, fmt.Errorf("mark connected: %w", err)
	}
	c.m.updates.Inc()
	log.Info("WorkloadEntry marked connected to this replica")
	return false, nil
}

// fieldManager names discovery's writes.
const fieldManager = "discovery"

// writeHealth sets the entry's Healthy condition, if the entry is this
// replica's and holds no newer probe.
func (c *Controller) writeHealth(ctx context.Context, key types.NamespacedName, cond *metav1alpha1.IstioCondition) error {
	api := c.client.NetworkingV1().WorkloadEntries(key.Namespace)
	we, err := api.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("health: %w", err) // created by a write still to come
	}
	if err != nil {
		return fmt.Errorf("health: read: %w", err)
	}
	if we.Annotations[AnnotationController] != c.opts.Replica {
		return nil // the proxy's newer stream is another replica's
	}
	if !setCondition(we, cond) {
		return nil
	}
	if _, err := api.UpdateStatus(ctx, we, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("health: update status: %w", err)
	}
	c.log.Debug("WorkloadEntry health updated", "entry", key.String(), "healthy", cond.GetStatus())
	return nil
}

// disconnect marks the entry disconnected; owned reports that it was this
// replica's to mark (so its cleanup is too).
func (c *Controller) disconnect(ctx context.Context, key types.NamespacedName, s snapshot) (owned bool, err error) {
	api := c.client.NetworkingV1().WorkloadEntries(key.Namespace)
	we, err := api.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read: %w", err)
	}
	if !disconnectVerdict(we, c.opts.Replica, s.connectedAt, s.disconnectedAt) {
		return false, nil
	}
	delete(we.Annotations, AnnotationConnectedAt)
	we.Annotations[AnnotationDisconnectedAt] = s.disconnectedAt.UTC().Format(timeFormat)
	if _, err := api.Update(ctx, we, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return false, fmt.Errorf("mark disconnected: %w", err)
	}
	if we.Annotations[AnnotationGroup] != "" {
		c.m.unregister.Inc()
	}
	c.log.Info("WorkloadEntry marked disconnected", "entry", key.String(), "gracePeriod", c.opts.GracePeriod.String())
	return true, nil
}

// cleanup deletes the entry if it is still due for it.
func (c *Controller) cleanup(ctx context.Context, key types.NamespacedName) error {
	api := c.client.NetworkingV1().WorkloadEntries(key.Namespace)
	we, err := api.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return c.deleteIfDue(ctx, we, "grace period")
}

// deleteIfDue deletes we if ShouldCleanup says so, on the condition that
// it has not changed since it was read.
func (c *Controller) deleteIfDue(ctx context.Context, we *networkingv1.WorkloadEntry, why string) error {
	if !ShouldCleanup(we, c.now(), c.opts.GracePeriod, c.opts.staleAfter()) {
		return nil
	}
	if we.Annotations[AnnotationGroup] == "" {
		return c.dropHealth(ctx, we, why)
	}
	rv, uid := we.ResourceVersion, we.UID
	err := c.client.NetworkingV1().WorkloadEntries(we.Namespace).Delete(ctx, we.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv, UID: &uid}})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone, or reconnected meanwhile
	case err != nil:
		return fmt.Errorf("delete: %w", err)
	}
	c.m.deletes.Inc()
	c.log.Info("deleted auto-registered WorkloadEntry", "entry", we.Namespace+"/"+we.Name, "after", why)
	return nil
}

// dropHealth removes the Healthy condition of an entry that was not
// auto-registered once its proxy is gone (istiod's deleteHealthCondition):
// nobody knows its health any more. The update carries the resource
// version read, so a reconnect meanwhile wins.
func (c *Controller) dropHealth(ctx context.Context, we *networkingv1.WorkloadEntry, why string) error {
	we = we.DeepCopy()
	kept := we.Status.Conditions[:0]
	for _, cond := range we.Status.Conditions {
		if cond.GetType() != ConditionHealthy {
			kept = append(kept, cond)
		}
	}
	we.Status.Conditions = kept
	_, err := c.client.NetworkingV1().WorkloadEntries(we.Namespace).UpdateStatus(ctx, we, metav1.UpdateOptions{FieldManager: fieldManager})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("remove the Healthy condition: %w", err)
	}
	c.log.Info("removed the Healthy condition of a WorkloadEntry whose proxy is gone", "entry", we.Namespace+"/"+we.Name, "after", why)
	return nil
}

// Sweep deletes, every ten grace periods until ctx ends, the
// auto-registered entries that are due and that no stream of this replica
// holds: those whose replica died or restarted before its own cleanup ran
// (istiod's periodicWorkloadEntryCleanup). istiod sweeps on every
// replica; here the leader does (run it with the leader), which is the
// same result with one replica's API calls.
func (c *Controller) Sweep(ctx context.Context) error {
	if c.client == nil || !c.opts.Enabled {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(10 * c.opts.GracePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.sweepOnce(ctx)
		}
	}
}

func (c *Controller) sweepOnce(ctx context.Context) {
	for _, cfg := range c.world().Configs(model.KindWorkloadEntry) {
		we, ok := cfg.Object.(*networkingv1.WorkloadEntry)
		if !ok || !ShouldCleanup(we, c.now(), c.opts.GracePeriod, c.opts.staleAfter()) {
			continue
		}
		c.mu.Lock()
		e := c.entries[types.NamespacedName{Namespace: we.Namespace, Name: we.Name}]
		mine := e != nil && e.connected()
		c.mu.Unlock()
		if mine {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		if err := c.deleteIfDue(rctx, we, "sweep"); err != nil {
			c.m.errors.WithLabelValues("api").Inc()
			c.log.Warn("sweep: WorkloadEntry not deleted; the next sweep tries again", "entry", we.Namespace+"/"+we.Name, "error", err)
		}
		cancel()
		// istiod limits cleanups to 20 a second.
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
