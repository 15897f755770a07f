"""Flask extension for rocketbox.

Will hold ``Rocketbox(app)`` / ``init_app``, the ``@transactional_message``
decorator and the ``flask rocketbox`` CLI group.
"""
