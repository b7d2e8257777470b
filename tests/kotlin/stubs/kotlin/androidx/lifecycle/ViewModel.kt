package androidx.lifecycle

import android.app.Application
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.cancel

// Stand-ins: lifecycle-viewmodel's ViewModel, AndroidViewModel, ViewModelStore and viewModelScope, with the real
// names and signatures the sample app and its JVM test use. Stand-in behaviour: viewModelScope runs on
// Dispatchers.Default (the real one on Dispatchers.Main.immediate: there is no main thread here) and, as the real
// one, is cancelled when the store clears the ViewModel, before onCleared.

abstract class ViewModel {
    internal val standInScope = CoroutineScope(SupervisorJob() + Dispatchers.Default)

    protected open fun onCleared() {}

    internal fun clear() {
        standInScope.cancel()
        onCleared()
    }
}

open class AndroidViewModel(private val application: Application) : ViewModel() {
    @Suppress("UNCHECKED_CAST")
    fun <T : Application> getApplication(): T = application as T
}

/** What holds an activity's ViewModels across rotations; clear() is what a finished screen gets. */
open class ViewModelStore {
    private val map = LinkedHashMap<String, ViewModel>()

    fun put(key: String, viewModel: ViewModel) {
        map.put(key, viewModel)?.clear()
    }

    operator fun get(key: String): ViewModel? = map[key]

    fun clear() {
        map.values.forEach { it.clear() }
        map.clear()
    }
}

val ViewModel.viewModelScope: CoroutineScope
    get() = standInScope
