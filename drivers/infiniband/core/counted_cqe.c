// SPDX-License-Identifier: GPL-2.0
/*
 * Completion entries that keep their module: a module cannot be unloaded
 * while work requests posted with one of its entries are outstanding.
 *
 * A provider calls an ib_cqe's done() whenever a work request posted with it
 * completes: when it is reaped, flushed by the error state, or matched by a
 * peer. A module that leaked a QP with receives still posted (the Rust ULP
 * API must stay sound if it does) would be called after it was unloaded.
 * So the work requests posted with counted entries are counted per module,
 * and the module is held (a module reference) while its count is not zero:
 * rmmod fails with -EWOULDBLOCK, as for any module in use. The count is
 * dropped by ib_counted_cqe_done(), ib_core's code, after the module's
 * done() has returned. A done() that posts again counts before it
 * returns, so the count does not pass through zero while a completion
 * runs.
 *
 * An entry is counted too: by its work requests and by its owner's
 * reference. Whichever drops the last frees it, through its release(), so
 * an owner never waits for a work request to complete: not even in a
 * done(), where the wait would never end. The last work request frees it
 * before it lets its module go, as release() is the module's code.
 *
 * A module that goes all the same (its init failed, or it posted while its
 * exit ran) is waited for before it is freed, by a module notifier.
 *
 * Objects whose teardown waits (a QP's drain, a CQ's free) and whose handle
 * is dropped in a done(), or in atomic context, are torn down later, on a
 * workqueue of ib_core's (ib_defer_drop()); a module goes only once none is
 * pending, as the teardown is its code.
 */

#include <linux/module.h>
#include <linux/percpu.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>

#include "core_priv.h"

/* The count of one module that has posted with counted entries. */
struct ib_cqe_owner {
	struct list_head list;	/* in owners, until its module goes */
	struct module *mod;
	atomic_long_t posted;
	long entries;		/* entries that point here, under owners_lock */
};

static DEFINE_SPINLOCK(owners_lock);
static LIST_HEAD(owners);

/* Entries' done() or release() running on this CPU (see enter_done()). */
static DEFINE_PER_CPU(unsigned int, in_done);

/*
 * Where the Rust ULPs' objects are torn down when their handles are dropped
 * in a done() or in atomic context (ib_counted_cqe_in_done()).
 */
static struct workqueue_struct *teardown_wq;
/* Teardowns queued and not done yet: a module goes only once none is. */
static atomic_t teardowns;

static struct ib_cqe_owner *find_owner(struct module *mod)
{
	struct ib_cqe_owner *o;

	list_for_each_entry(o, &owners, list)
		if (o->mod == mod)
			return o;
	return NULL;
}

/* Points @c at its module's count, made on the module's first post. */
static int attach_owner(struct ib_counted_cqe *c)
{
	struct ib_cqe_owner *o, *new = NULL;
	unsigned long flags;

	spin_lock_irqsave(&owners_lock, flags);
	while (!c->owner) {
		o = find_owner(c->mod);
		if (!o && new) {
			o = new;
			new = NULL;
			o->mod = c->mod;
			list_add(&o->list, &owners);
		}
		if (o) {
			o->entries++;
			/* Pairs with ib_counted_cqe_post()'s acquire. */
			smp_store_release(&c->owner, o);
			break;
		}
		spin_unlock_irqrestore(&owners_lock, flags);
		new = kzalloc_obj(*new, GFP_ATOMIC);
		if (!new)
			return -ENOMEM;
		spin_lock_irqsave(&owners_lock, flags);
	}
	spin_unlock_irqrestore(&owners_lock, flags);
	kfree(new);
	return 0;
}

/**
 * ib_counted_cqe_post - count a work request about to be posted with @c
 * @c: an entry with @c->cqe.done = ib_counted_cqe_done, @c->done,
 *     @c->release and @c->mod set (@c->mod: the module that they are code
 *     of, NULL if built in), whose @c->refs counts the work request already
 *
 * Return: 0, or -ENOMEM; then the work request must not be posted, and the
 * caller takes it off @c->refs.
 */
int ib_counted_cqe_post(struct ib_counted_cqe *c)
{
	struct ib_cqe_owner *o;

	if (!c->mod)
		return 0;
	/* Pairs with attach_owner()'s release. */
	if (!smp_load_acquire(&c->owner)) {
		int ret = attach_owner(c);

		if (ret)
			return ret;
	}
	o = READ_ONCE(c->owner);
	if (atomic_long_inc_return(&o->posted) == 1)
		__module_get(o->mod);
	return 0;
}
EXPORT_SYMBOL_GPL(ib_counted_cqe_post);

/* Forgets @c's owner, before @c is freed. */
static void owner_forget(struct ib_counted_cqe *c)
{
	struct ib_cqe_owner *o = c->mod ? c->owner : NULL;
	unsigned long flags;

	if (!o)
		return;
	spin_lock_irqsave(&owners_lock, flags);
	/* Unlisted: its module has gone, and this was its last entry. */
	if (!--o->entries && list_empty(&o->list))
		kfree(o);
	spin_unlock_irqrestore(&owners_lock, flags);
}

/*
 * A done() or release() runs on one CPU, counted there, so that
 * ib_counted_cqe_in_done() can tell: without preemption, so that one that
 * sleeps is reported in every poll context; on PREEMPT_RT, where its
 * spinlocks sleep, only without migration, and another task that runs on
 * the CPU meanwhile defers its teardowns too.
 */
static void enter_done(void)
{
	if (IS_ENABLED(CONFIG_PREEMPT_RT))
		migrate_disable();
	else
		preempt_disable();
	this_cpu_inc(in_done);
}

static void exit_done(void)
{
	this_cpu_dec(in_done);
	if (IS_ENABLED(CONFIG_PREEMPT_RT))
		migrate_enable();
	else
		preempt_enable();
}

/* Drops @n references to @c; the last frees it. */
static void entry_unref(struct ib_counted_cqe *c, long n)
{
	if (atomic_long_sub_and_test(n, &c->refs)) {
		owner_forget(c);
		enter_done();
		c->release(c);
		exit_done();
	}
}

/*
 * Drops @n of @c's outstanding work requests: the entry's references first,
 * which may free it with its module's code, then its module's count.
 */
static void entry_put(struct ib_counted_cqe *c, long n)
{
	struct ib_cqe_owner *o = c->mod ? READ_ONCE(c->owner) : NULL;

	entry_unref(c, n);
	/*
	 * A module that goes regardless (failed init) may be freed once its
	 * count is zero: the notifier lets a grace period pass.
	 */
	rcu_read_lock();
	if (o && atomic_long_sub_and_test(n, &o->posted)) {
		module_put(o->mod);
		wake_up_var(&o->posted);
	}
	rcu_read_unlock();
}

/**
 * ib_counted_cqe_unpost - undo ib_counted_cqe_post() for @n work requests
 * @c: the entry
 * @n: work requests that were counted but will never complete: not posted,
 *     or posted to a queue that was destroyed
 */
void ib_counted_cqe_unpost(struct ib_counted_cqe *c, long n)
{
	if (n)
		entry_put(c, n);
}
EXPORT_SYMBOL_GPL(ib_counted_cqe_unpost);

/**
 * ib_counted_cqe_done - the done() of every counted entry
 * @cq: the CQ
 * @wc: the completion, of a work request posted with a counted entry
 *
 * Calls the entry's own done(), then drops the counts.
 */
void ib_counted_cqe_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct ib_counted_cqe *c =
		container_of(wc->wr_cqe, struct ib_counted_cqe, cqe);

	enter_done();
	c->done(cq, wc);
	exit_done();
	/* The module's code has returned: now it may go. */
	entry_put(c, 1);
}
EXPORT_SYMBOL_GPL(ib_counted_cqe_done);

/**
 * ib_counted_cqe_in_done - whether this is a counted entry's done() or
 *	release(), or atomic context
 *
 * A held spinlock, or an RCU read-side section, shows only with
 * CONFIG_PREEMPT_COUNT, as for might_sleep(); disabled bottom halves and
 * interrupts always do.
 *
 * Return: true where a teardown must not wait: in a done(), a drain or a
 * CQ's free would wait for the very completion being handled, and in
 * atomic context they may not sleep.
 */
bool ib_counted_cqe_in_done(void)
{
	if (this_cpu_read(in_done) || !in_task() || softirq_count() ||
	    irqs_disabled())
		return true;
	return IS_ENABLED(CONFIG_PREEMPT_COUNT) &&
	       (!preemptible() || rcu_preempt_depth());
}
EXPORT_SYMBOL_GPL(ib_counted_cqe_in_done);

static void deferred_drop_work(struct work_struct *work)
{
	struct ib_deferred_drop *d =
		container_of(work, struct ib_deferred_drop, work);

	d->run(d);
	/* @d is freed, and @run has returned: now its module may go. */
	if (atomic_dec_and_test(&teardowns))
		wake_up_var(&teardowns);
}

/**
 * ib_defer_drop - tear an object down later, in process context
 * @d: with @d->run set; @d->run tears the object down and frees @d, on
 *     ib_core's teardown workqueue
 *
 * A module that goes (rmmod, or a failed init) is freed only once every
 * teardown queued so far, and those they queue, has run: its code may be
 * @d->run's.
 */
void ib_defer_drop(struct ib_deferred_drop *d)
{
	atomic_inc(&teardowns);
	INIT_WORK(&d->work, deferred_drop_work);
	queue_work(teardown_wq, &d->work);
}
EXPORT_SYMBOL_GPL(ib_defer_drop);

/**
 * ib_counted_cqe_put - drop the owner's reference to an entry
 * @c: the entry; freed here, or by its last outstanding work request
 */
void ib_counted_cqe_put(struct ib_counted_cqe *c)
{
	entry_unref(c, 1);
}
EXPORT_SYMBOL_GPL(ib_counted_cqe_put);

/*
 * A module goes although it is held: its init failed, or it posted while its
 * exit ran. It is freed after the GOING notifiers; this one runs first
 * (INT_MAX: before kprobes, tracing and static calls let go of its code) and
 * waits until nothing it posted is outstanding. Only a leak makes that wait
 * long, under the notifier chain's rwsem, as every GOING notifier runs.
 */
static int counted_cqes_module_going(struct notifier_block *nb,
				     unsigned long state, void *data)
{
	struct module *mod = data;
	struct ib_cqe_owner *o;
	long posted;

	if (state != MODULE_STATE_GOING)
		return NOTIFY_DONE;
	/* Teardowns run the code of the module that dropped the object. */
	wait_var_event(&teardowns, !atomic_read(&teardowns));
	spin_lock_irq(&owners_lock);
	o = find_owner(mod);
	spin_unlock_irq(&owners_lock);
	if (!o)
		return NOTIFY_DONE;

	posted = atomic_long_read(&o->posted);
	if (posted) {
		pr_warn("%s: goes with %ld work requests posted with its completion entries outstanding; waiting for them\n",
			mod->name, posted);
		wait_var_event(&o->posted, !atomic_long_read(&o->posted));
		/* And what its last done()s dropped. */
		wait_var_event(&teardowns, !atomic_read(&teardowns));
	}
	/* For entry_put()s that saw zero and still touch @o, @mod, their entry. */
	synchronize_rcu();

	/* Leaked entries keep pointing at @o: keep it for them. */
	spin_lock_irq(&owners_lock);
	list_del_init(&o->list);
	if (!o->entries)
		kfree(o);
	spin_unlock_irq(&owners_lock);
	return NOTIFY_OK;
}

static struct notifier_block counted_cqes_nb = {
	.notifier_call = counted_cqes_module_going,
	.priority = INT_MAX,
};

int ib_counted_cqe_init(void)
{
	int ret;

	teardown_wq = alloc_workqueue("ib_teardown",
				      WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!teardown_wq)
		return -ENOMEM;
	ret = register_module_notifier(&counted_cqes_nb);
	if (ret)
		destroy_workqueue(teardown_wq);
	return ret;
}

void ib_counted_cqe_cleanup(void)
{
	unregister_module_notifier(&counted_cqes_nb);
	destroy_workqueue(teardown_wq);
}
