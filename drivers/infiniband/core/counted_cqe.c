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
 * done() has returned, and then the entry's own count: an owner that sees
 * its entry idle may rmmod at once. A done() that posts again counts before
 * it returns, so the count does not pass through zero while a completion
 * runs.
 *
 * A module that goes all the same (its init failed, or it posted while its
 * exit ran) is waited for before it is freed, by a module notifier.
 */

#include <linux/module.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>
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
 * @c: an entry with @c->cqe.done = ib_counted_cqe_done, @c->done and @c->mod
 *     set (@c->mod: the module that @c->done is code of, NULL if built in),
 *     whose @c->outstanding counts the work request already
 *
 * Return: 0, or -ENOMEM; then the work request must not be posted, and the
 * caller takes it off @c->outstanding.
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

/*
 * Drops @n of @c's outstanding work requests: its module's count first, so
 * that once @c shows none outstanding (its owner may then rmmod), the module
 * is no longer held. @c may be freed after this.
 */
static void entry_put(struct ib_counted_cqe *c, long n)
{
	struct ib_cqe_owner *o = c->mod ? READ_ONCE(c->owner) : NULL;

	/*
	 * A module that goes regardless (failed init) may be freed, @c with
	 * it, once its count is zero: the notifier lets a grace period pass.
	 */
	rcu_read_lock();
	if (o && atomic_long_sub_and_test(n, &o->posted)) {
		module_put(o->mod);
		wake_up_var(&o->posted);
	}
	atomic_long_sub_return_release(n, &c->outstanding);
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

	c->done(cq, wc);
	/* The module's code has returned: now it may go. */
	entry_put(c, 1);
}
EXPORT_SYMBOL_GPL(ib_counted_cqe_done);

/**
 * ib_counted_cqe_release - forget an entry before it is freed
 * @c: an entry with no work request outstanding
 */
void ib_counted_cqe_release(struct ib_counted_cqe *c)
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
EXPORT_SYMBOL_GPL(ib_counted_cqe_release);

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

void ib_counted_cqe_init(void)
{
	register_module_notifier(&counted_cqes_nb);
}

void ib_counted_cqe_cleanup(void)
{
	unregister_module_notifier(&counted_cqes_nb);
}
